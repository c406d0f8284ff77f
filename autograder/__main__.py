"""python -m autograder {collect,grade,serve,refresh,export,build,budgets,site} — see README.md and docs/."""

import argparse
import os
import sys
from pathlib import Path

from autograder import GradingError, budgets, build, collect, course_dir, docs, lms, record, serve
from autograder.grade import grade as run_grade
from autograder.grade import instructor_course, refresh
from autograder.results import table
from autograder.submissions import DEFAULT_NAMED_REGEXP


def _course(folder: Path | None):
    """The instructor's course directory: folder, or this repository."""
    if folder is None:
        return instructor_course()
    if not (folder / "nbgrader_config.py").is_file():
        raise GradingError(f"{folder} is not an nbgrader course directory: it has no nbgrader_config.py")
    return instructor_course(folder.resolve())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    gather = commands.add_parser("collect", help="collect an assignment's submissions from nbgrader's exchange into "
                                 "submitted/, believing nothing a student wrote (instead of nbgrader collect)")
    gather.add_argument("assignment", metavar="ASSIGNMENT")
    gather.add_argument("--course", type=Path, default=None, metavar="DIR", help="as for grade")
    gather.add_argument("--no-check-owner", action="store_true",
                        help="accept a student's folder in the exchange whatever user owns it (a hub whose "
                             "students share one uid; then a student can hand in as another)")

    grade = commands.add_parser("grade", help="grade a folder or zip of submissions with nbgrader")
    grade.add_argument("path", type=Path, help="folder <student>/<assignment>/<notebook>.ipynb, or a zip of one")
    grade.add_argument("--out", type=Path, required=True, help="where grades.csv and feedback/ go")
    grade.add_argument("--assignment", action="append", dest="assignments", metavar="NAME",
                       help="grade only this assignment (repeatable); default: all")
    grade.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), metavar="N",
                       help="grade N submissions at once, each in its own process and nbgrader workspace "
                            "(default: half the cores)")
    grade.add_argument("--cell-timeout", type=int, default=120, metavar="SECONDS",
                       help="wall time one cell may run before it is interrupted (default 120)")
    grade.add_argument("--notebook-timeout", type=int, default=None, metavar="SECONDS",
                       help="wall time one notebook may run in all, reruns after a crash included; the cells left "
                            "when it runs out are not run and score 0, with a note (default: the assignment's "
                            "budget, 10 x its solution's measured grading, at least 60 s: autograder/budgets.py)")
    grade.add_argument("--no-sandbox", action="store_true",
                       help="run student code without the bubblewrap sandbox: only on a trusted machine")
    grade.add_argument("--named-regexp", default=None, metavar="REGEX",
                       help="file-name pattern of a learning-management-system export, with named groups "
                            "student_id, file_id and optionally timestamp (nbgrader zip_collect's convention)")
    grade.add_argument("--gradebook", action="store_true",
                       help="also record the results in the course's nbgrader gradebook (nbgrader_config.py's "
                            "db_url, else gradebook.db) and its submitted/, autograded/ and feedback/ folders, "
                            "as nbgrader autograde does: Formgrader, nbgrader export and release_feedback see them")
    grade.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on the workers of this Dask scheduler (tcp://host:8786) instead of local "
                            "worker processes; every node needs the course checked out and setup.sh run")
    grade.add_argument("--prune", action="store_true",
                       help="keep in DIR only the results of this batch: remove every other row and its feedback "
                            "(without it, earlier results of students and assignments not in this batch stay)")
    grade.add_argument("--cold-kernels", action="store_true",
                       help="start each kernel when its notebook does, as nbgrader does (by default each worker "
                            "starts the next submission's kernel while the current one runs: same results, faster)")
    grade.add_argument("--no-fork-server", action="store_true",
                       help="start each warm kernel with bwrap, as a cold one, instead of forking it from the "
                            "worker's fork server, which has torch imported already (only a root grader forks; "
                            "same results, slower)")
    grade.add_argument("--kernel-threads", type=int, default=None, metavar="N",
                       help="torch threads per kernel (default: the cores shared among the workers; 1 on a cluster)")
    grade.add_argument("--course", type=Path, default=None, metavar="DIR",
                       help="with --gradebook: the nbgrader course directory whose nbgrader_config.py names the "
                            "gradebook and the late policy, and whose submitted/, autograded/ and feedback/ get the "
                            "files (default: this repository; a folder of its own keeps the record out of a public "
                            "clone)")
    grade.add_argument("--student", action="append", dest="students", metavar="NAME",
                       help="grade only this student's submissions in PATH (repeatable); every other result in DIR "
                            "stays as it was")
    grade.add_argument("--roster", type=Path, default=None, metavar="CSV",
                       help="the class list, as `nbgrader db student import` reads it (id,first_name,last_name,"
                            "email): a student with no submission gets a `missing` row (with --gradebook, the "
                            "gradebook's students count too)")

    service = commands.add_parser("serve", help="grade each submission as it reaches the exchange and release its "
                                  "feedback at once (or at the due date): feedback a minute after Submit")
    service.add_argument("--out", type=Path, required=True, help="as for grade (grades.csv, feedback/, serve.log)")
    service.add_argument("--assignment", action="append", dest="assignments", metavar="NAME", required=True,
                         help="serve this assignment (repeatable); others stay for collect and grade")
    service.add_argument("--course", type=Path, default=None, metavar="DIR", help="as for grade")
    service.add_argument("--hold-until-due", action="store_true",
                         help="grade at once but release feedback only after the gradebook's due date")
    service.add_argument("--per-hour", type=int, default=0, metavar="N",
                         help="grade at most N submissions per student per hour; later ones wait (default: no limit)")
    service.add_argument("--per-day", type=int, default=0, metavar="N", help="likewise per day")
    service.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), metavar="N",
                         help="as for grade")
    service.add_argument("--batch", type=int, default=8, metavar="N",
                         help="grade at most N submissions at once, the oldest first (default 8)")
    service.add_argument("--poll", type=float, default=2.0, metavar="SECONDS",
                         help="how often to look in the exchange (default 2)")
    service.add_argument("--once", action="store_true", help="one pass, then stop")
    service.add_argument("--no-check-owner", action="store_true", help="as for collect")
    service.add_argument("--no-sandbox", action="store_true", help="as for grade: only on a trusted machine")

    again = commands.add_parser("refresh", help="rewrite DIR/grades.csv and DIR/report.md from the gradebook "
                                                 "(after manual grading, extra credit or a late penalty)")
    again.add_argument("out", type=Path, metavar="DIR", help="a folder graded into with --gradebook")
    again.add_argument("--roster", type=Path, default=None, metavar="CSV", help="as for grade")
    again.add_argument("--course", type=Path, default=None, metavar="DIR", help="as for grade")

    export = commands.add_parser("export", help="write the gradebook's scores for an LMS or a registrar")
    export.add_argument("format", choices=lms.FORMATS, help="canvas, moodle (grade import CSV) or wide (a column "
                                                            "per assignment and a total)")
    export.add_argument("--out", type=Path, required=True, metavar="FILE", help="the CSV file to write")
    export.add_argument("--assignment", action="append", dest="assignments", metavar="NAME",
                        help="only this assignment (repeatable); default: every assignment in the gradebook")
    export.add_argument("--course", type=Path, default=None, metavar="DIR", help="as for grade")

    rebuild = commands.add_parser("build", help="rebuild release/, solutions/ and samples/ from source/")
    rebuild.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    rebuild.add_argument("--skip-solutions", action="store_true", help="do not execute the solution notebooks")
    rebuild.add_argument("--assignment", action="append", dest="assignments", metavar="NAME",
                       help="build only this assignment (repeatable); default: all")

    measure = commands.add_parser("budgets", help="grade each solution and record how long it took: each "
                                  "assignment's notebook budget derives from it (autograder/budgets.json)")
    measure.add_argument("--assignment", action="append", dest="assignments", metavar="NAME",
                         help="measure only this assignment (repeatable); default: all")
    measure.add_argument("--no-sandbox", action="store_true", help="measure without the bubblewrap sandbox")

    site = commands.add_parser("site", help="build the course's site (docs/ and the executed notebooks of "
                               "solutions/, with Sphinx and MyST-NB): searchable, and it works offline")
    site.add_argument("--out", type=Path, default=Path("site"), help="folder to write it to (default: site/)")

    args = parser.parse_args(argv)
    if args.command == "grade":
        course = _course(args.course) if args.gradebook else None
        if note := course_dir.installed_course_note():
            print(note, file=sys.stderr)
        grades = run_grade(args.path, args.out, args.assignments, workers=args.workers,
                           sandbox=not args.no_sandbox, named_regexp=args.named_regexp or DEFAULT_NAMED_REGEXP,
                           cell_seconds=args.cell_timeout, notebook_seconds=args.notebook_timeout, gradebook=course,
                           scheduler=args.scheduler, kernel_threads=args.kernel_threads, prune=args.prune,
                           students=args.students, roster=args.roster, warm=not args.cold_kernels,
                           fork=not args.no_fork_server)
        print()
        print(table(grades))
        print(f"\nwrote {args.out / 'grades.csv'}, {args.out / 'report.md'} and feedback under "
              f"{args.out / 'feedback'}")
        if course is not None:
            print(f"recorded in the gradebook {course.db_url} and under {course.root}/autograded")
        return 0
    if args.command == "collect":
        root = _course(args.course).root
        outcomes = collect.collect(args.assignment, root, check_owner=not args.no_check_owner)
        if args.no_check_owner:
            print("note: owners not checked (--no-check-owner): a folder's name in the exchange is the only claim to "
                  "whose it is; where students share one uid, any of them can hand in, replace or remove one under "
                  "another's name", file=sys.stderr)
        for item in outcomes:
            said = {"collected": f"collected, handed in {item.when}", "unchanged": "nothing newer to collect",
                    "refused": "refused"}[item.outcome]
            print(f"{item.student}: {said}" + "".join(f"\n    {reason}" for reason in item.reasons))
        print(f"{len(outcomes)} student(s) in the exchange; submissions in {root / 'submitted'}; grade them with "
              f"python -m autograder grade {root / 'submitted'} --assignment {args.assignment} --gradebook --out DIR")
        return 0
    if args.command == "serve":
        policy = serve.Policy(tuple(args.assignments), hold=args.hold_until_due, per_hour=args.per_hour,
                              per_day=args.per_day, batch=args.batch, check_owner=not args.no_check_owner,
                              workers=args.workers, sandbox=not args.no_sandbox)
        return serve.serve(serve.Service(_course(args.course), args.out, policy), poll=args.poll, once=args.once)
    if args.command == "refresh":
        course = _course(args.course)
        grades = refresh(args.out, course, roster=args.roster)
        print(table(grades))
        print(f"\nwrote {args.out / 'grades.csv'} and {args.out / 'report.md'} from the gradebook {course.db_url}")
        return 0
    if args.command == "export":
        course = _course(args.course)
        count = lms.write(record.read(course.db_url), args.format, args.out, args.assignments)
        print(f"wrote {args.out}: {count} student(s) from the gradebook {course.db_url} ({args.format})")
        return 0
    if args.command == "budgets":
        budgets.write(budgets.measure(args.assignments, sandbox=not args.no_sandbox))
        print(f"wrote {budgets.FILE}")
        return 0
    if args.command == "site":
        return docs.main(args.out)
    return build.main(check=args.check, solutions=not args.skip_solutions, only=args.assignments)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GradingError as problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
