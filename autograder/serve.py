"""Feedback a minute after Submit: ``python -m autograder serve`` grades each submission as it reaches the exchange.

A long-running service beside nbgrader's exchange, run as the instructor (or as a JupyterHub service, deploy/).
Every few seconds it looks in the exchange's ``inbound/`` for submission folders it has not handled, oldest first,
and for the assignments it serves:

1. collects them as ``python -m autograder collect`` does (autograder/collect.py: owners checked, links and special
   files refused, the hand-in time from the file system, never from the student);
2. grades the students collected with ``grade`` into the gradebook: the same workers, warm kernels, sandbox, secret
   and late policy as a batch, so the score, the feedback page and the gradebook entry are the ones a batch grading
   would give;
3. releases each student's feedback to the exchange with nbgrader's own release_feedback, where the Assignment
   List's "Fetch Feedback" finds it; the page's header says how long the student waited and why.

What an instructor controls (``Policy``): which assignments are served; feedback released at once or held until the
assignment's due date in the gradebook (scores are recorded either way); a limit on graded submissions per student
per hour and per day (a submission over it is kept, graded when the limit allows, and the student finds a page in
the Assignment List saying so). Late penalties are the gradebook's, as for a batch.

Nothing is lost or done twice across a restart: what became of every inbound folder is kept in
``<out>/.serve-state.json``, rewritten after each step. A service stopped (killed, the machine restarted) and started
again finds the folders that arrived meanwhile; a folder it had collected but not released is graded again only if
its content changed (grade's own state reuses an unchanged result). Every folder is hostile input: a name that is not
nbgrader's, a link, a folder owned by another student are refused, and the reason is in ``<out>/serve.log`` (and, where
a student can be named, in their row). A submission that breaks the grader becomes that student's error row with its
log, and the service goes on.
"""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

from autograder import GradingError, course_dir
from autograder.collect import collect, exchange_inbound
from autograder.exchange import SECRET, SECRET_FORM, feedback_name
from autograder.grade import Course
from autograder.grade import grade as run_grade
from autograder.workspace import quiet_gradebook

STATE_FILE = ".serve-state.json"
LOG_FILE = "serve.log"
LOCK_FILE = ".serve.lock"
#: what nbgrader's submit names a folder in inbound/: <student>+<assignment>+<timestamp>[+<random>]
FOLDER_NAME = re.compile(r"(?P<student>[^+/.][^+/]*)\+(?P<assignment>[^+/]+)\+(?P<stamp>[^+/]+)(\+[^+/]*)?")
HOUR, DAY = 3600.0, 86400.0
#: folders still to grade (in arrival order) and those done
WAITING, DONE = ("waiting", "deferred"), ("released", "held", "superseded", "refused", "ignored", "error")


@dataclass(frozen=True)
class Policy:
    """What the instructor decides. per_hour, per_day: graded submissions per student (0: no limit). batch: at most
    this many submissions graded at once (memory stays bounded under a burst; the rest wait their turn)."""

    assignments: tuple[str, ...]
    hold: bool = False
    per_hour: int = 0
    per_day: int = 0
    batch: int = 8
    check_owner: bool = True
    workers: int = 1
    sandbox: bool = True


class Service:
    """The grading service of one course, writing into out (as ``grade --gradebook --out out`` does)."""

    def __init__(self, course: Course, out: Path, policy: Policy, clock: Callable[[], float] = time.time):
        unknown = sorted(set(policy.assignments) - set(course_dir.assignments()))
        if unknown:
            raise GradingError(f"unknown assignment(s) {unknown}; this course has {course_dir.assignments()}")
        self.course, self.out, self.policy, self.clock = course, Path(out), policy, clock
        self.inbound, self.course_id = exchange_inbound(course.root)
        self.out.mkdir(parents=True, exist_ok=True)
        self.state_path = self.out / STATE_FILE
        self.arrivals: dict[str, dict] = self._read_state()

    # --------------------------------------------------------------------------------------------- state and log

    def _read_state(self) -> dict[str, dict]:
        try:
            return json.loads(self.state_path.read_text())["arrivals"]
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as error:
            raise GradingError(f"{self.state_path} is not a state this service wrote ({error}); move it away to start "
                               "afresh (every submission in the exchange is then graded again)") from error

    def _save(self) -> None:
        partial = self.state_path.with_suffix(".partial")
        partial.write_text(json.dumps({"arrivals": self.arrivals}, indent=1, sort_keys=True))
        partial.replace(self.state_path)

    def log(self, text: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        with (self.out / LOG_FILE).open("a") as f:
            f.write(f"{stamp} {text}\n")

    # --------------------------------------------------------------------------------------------- one step

    def step(self) -> dict[str, str]:
        """One pass: look for new folders, grade what may be graded now (oldest first, at most policy.batch), release
        what may be released. Returns what became of each folder handled in this pass."""
        done: dict[str, str] = {}
        self._scan(done)
        now = self.clock()
        ready = []
        for name, item in sorted(self.arrivals.items(), key=lambda kv: (kv[1]["arrived"], kv[0])):
            if item["status"] not in WAITING:
                continue
            until = self._allowed_from(item["student"], now)
            if until > now:
                if item["status"] != "deferred" or item.get("until") != until:
                    item.update(status="deferred", until=until)
                    self._tell_deferred(name, item)
                    done[name] = "deferred"
                continue
            if len(ready) < self.policy.batch:
                ready.append(name)
        for assignment in self.policy.assignments:
            names = [n for n in ready if self.arrivals[n]["assignment"] == assignment]
            if names:
                self._grade(assignment, names, done)
        self._release(done)
        self._save()
        return done

    def _scan(self, done: dict[str, str]) -> None:
        try:
            entries = list(os.scandir(self.inbound))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name in self.arrivals:
                continue
            match = FOLDER_NAME.fullmatch(entry.name)
            if match and match["assignment"] not in self.policy.assignments:
                continue  # another assignment's: not served, collected by hand or by another service
            try:
                arrived = os.lstat(entry.path).st_ctime
            except FileNotFoundError:
                continue
            item = {"student": match["student"] if match else "", "assignment": match["assignment"] if match else "",
                    "arrived": arrived, "status": "waiting"}
            if not match:
                item.update(status="ignored", message="not named as nbgrader submit names a submission "
                                                      "(<student>+<assignment>+<timestamp>)")
                self.log(f"ignored {entry.name!r} in {self.inbound}: {item['message']}")
                done[entry.name] = "ignored"
            else:
                self.log(f"arrived {entry.name!r}")
            self.arrivals[entry.name] = item
        self._save()

    def _allowed_from(self, student: str, now: float) -> float:
        """When this student's next submission may be graded (now, unless a limit is reached)."""
        graded = sorted(item["graded"] for item in self.arrivals.values()
                        if item["student"] == student and item.get("graded"))
        soonest = now
        for limit, window in ((self.policy.per_hour, HOUR), (self.policy.per_day, DAY)):
            recent = [t for t in graded if t > now - window]
            if limit and len(recent) >= limit:
                soonest = max(soonest, recent[-limit] + window)
        return soonest

    def _grade(self, assignment: str, names: list[str], done: dict[str, str]) -> None:
        students = sorted({self.arrivals[n]["student"] for n in names})
        try:
            found = collect(assignment, self.course.root, check_owner=self.policy.check_owner)
            outcomes = {o.student: o for o in found}
        except Exception:  # noqa: BLE001 - the service goes on; the cause is in its log
            self._failed(names, "collecting from the exchange failed", traceback.format_exc(), done)
            return
        graded = []
        for student in students:
            outcome = outcomes.get(student)
            mine = [n for n in names if self.arrivals[n]["student"] == student]
            if outcome is None or outcome.outcome == "refused" or not (self.course.root / "submitted" / student
                                                                       / assignment).is_dir():
                reasons = "; ".join(outcome.reasons) if outcome and outcome.reasons else "nothing could be collected"
                for n in mine:
                    self.arrivals[n].update(status="refused", message=reasons)
                    done[n] = "refused"
                self.log(f"refused {mine}: {reasons}")
                continue
            if outcome.reasons:  # one folder refused, a good one collected
                self.log(f"{student}: {'; '.join(outcome.reasons)}")
            graded.append(student)
        if not graded:
            return
        started = self.clock()
        try:
            rows = run_grade(self.course.root / "submitted", self.out, [assignment], workers=self.policy.workers,
                             sandbox=self.policy.sandbox, gradebook=self.course, students=graded, progress=False)
        except Exception:  # noqa: BLE001
            self._failed([n for n in names if self.arrivals[n]["student"] in graded], "grading failed",
                         traceback.format_exc(), done)
            return
        finished = self.clock()
        status = {(r.student, r.assignment): r for r in rows}
        for student in graded:
            mine = sorted((n for n in names if self.arrivals[n]["student"] == student),
                          key=lambda n: self.arrivals[n]["arrived"])
            row = status.get((student, assignment))
            # also the student's earlier folders that are still waiting: collect took the latest of them all
            earlier = [n for n, item in self.arrivals.items() if item["student"] == student
                       and item["assignment"] == assignment and item["status"] in WAITING and n not in mine]
            for n in earlier + mine[:-1]:
                self.arrivals[n].update(status="superseded", message=f"a later submission, {mine[-1]!r}, was graded")
                done[n] = "superseded"
            last = self.arrivals[mine[-1]]
            last.update(status="graded", graded=finished, started=started,
                        score=f"{row.score:g}/{row.max_score:g} {row.status}".strip() if row else "no row")
            self.log(f"graded {mine[-1]!r}: {last['score']} in {finished - started:.1f} s")
            done[mine[-1]] = "graded"

    def _failed(self, names: list[str], what: str, trace: str, done: dict[str, str]) -> None:
        path = self.out / "logs" / "serve-failures.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"--- {datetime.now(timezone.utc).isoformat()} {what} for {names}\n{trace}\n")
        for n in names:
            self.arrivals[n].update(status="error", message=f"{what} (the whole log: {path.relative_to(self.out)})")
            done[n] = "error"
        self.log(f"{what} for {names}: {trace.strip().splitlines()[-1]} (the whole log: {path})")

    # --------------------------------------------------------------------------------------------- release

    def _due(self, assignment: str) -> float | None:
        with quiet_gradebook(), Gradebook(self.course.db_url) as gradebook:
            try:
                due = gradebook.find_assignment(assignment).duedate
            except Exception:  # noqa: BLE001 - nbgrader's MissingEntry: no such assignment yet
                return None
        return due.replace(tzinfo=timezone.utc).timestamp() if due else None

    def _release(self, done: dict[str, str]) -> None:
        now = self.clock()
        for name, item in sorted(self.arrivals.items(), key=lambda kv: kv[1]["arrived"]):
            if item["status"] not in ("graded", "held"):
                continue
            due = self._due(item["assignment"]) if self.policy.hold else None
            if due is not None and now < due:
                if item["status"] != "held":
                    item["status"] = "held"
                    done[name] = "held"
                continue
            try:
                self._write_wait(item, now)
                result = self._api().release_feedback(item["assignment"], item["student"])
                if not result["success"]:
                    raise GradingError(str(result.get("error") or result.get("log")))
            except Exception:  # noqa: BLE001
                self._failed([name], "releasing feedback failed", traceback.format_exc(), done)
                continue
            item.update(status="released", released=now)
            done[name] = "released"
            self.log(f"released feedback of {name!r}, {now - item['arrived']:.0f} s after it arrived")

    def _api(self) -> NbGraderAPI:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(self.course.root)).load_config()
        config.CourseDirectory.root = str(self.course.root)
        config.CourseDirectory.db_url = self.course.db_url
        return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)

    def _write_wait(self, item: dict, now: float) -> None:
        """Say in the header of each feedback page how long the student waited, and why, before it is released."""
        ahead = sum(1 for other in self.arrivals.values() if other.get("started") and other is not item
                    and other["arrived"] < item["arrived"] and other.get("graded", 0) > item["arrived"])
        waited = (item.get("graded") or now) - item["arrived"]
        words = f"Graded {waited:.0f} s after you submitted"
        if ahead:
            words += f" ({ahead} submission(s) of others were graded first)"
        if item.get("until"):
            words += ("; it waited for your limit of graded submissions "
                      f"({self._limits()}) to allow it")
        if item["status"] == "held":
            words += "; released at the due date, as your instructor chose"
        line = f'<p class="autograder-wait" style="font-style:italic">{html.escape(words)}.</p>'
        folder = self.course.root / "feedback" / item["student"] / item["assignment"]
        for page in folder.glob("*.html"):
            text = re.sub(r'<p class="autograder-wait"[^>]*>.*?</p>', "", page.read_text(), count=1, flags=re.S)
            page.write_text(re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + line, text, count=1))

    def _limits(self) -> str:
        parts = [f"{self.policy.per_hour} an hour"] if self.policy.per_hour else []
        parts += [f"{self.policy.per_day} a day"] if self.policy.per_day else []
        return ", ".join(parts)

    def _tell_deferred(self, name: str, item: dict) -> None:
        """A page in the exchange, where the Assignment List finds this submission's feedback, saying it is kept and
        when it will be graded; the real feedback replaces it."""
        folder = self.inbound / name
        try:
            fd = os.open(folder / SECRET, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                secret = f.read(1024).decode(errors="replace").strip()
            notebooks = [p.name for p in course_dir.source_dir().joinpath(item["assignment"]).glob("*.ipynb")]
        except OSError:
            return
        when = datetime.fromtimestamp(item["until"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.log(f"deferred {name!r} until {when}: limit {self._limits()}")
        if not SECRET_FORM.fullmatch(secret):
            return
        feedback = self.inbound.parent / "feedback"
        if not feedback.is_dir():  # as nbgrader's release_feedback makes it: students reach a page only by its name
            feedback.mkdir(mode=0o711)
            feedback.chmod(0o711)
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Kept, not graded yet</title></head><body>"
                f"<p>Your submission is kept. You have reached this assignment's limit of graded submissions "
                f"({html.escape(self._limits())}), so it will be graded at {when} and its feedback will replace this "
                f"page.</p></body></html>")
        for notebook in notebooks:
            target = feedback / feedback_name(secret, notebook)
            try:
                target.write_text(page)
                target.chmod(0o644)
            except OSError as error:
                self.log(f"could not tell {item['student']} that {name!r} is deferred: {error}")


def serve(service: Service, poll: float = 2.0, once: bool = False) -> int:
    """Run the service until SIGTERM or SIGINT (the step under way is finished first), or one step with once. Only
    one service may write into an out folder at a time."""
    lock = (service.out / LOCK_FILE).open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise GradingError(f"another service is already writing into {service.out} (it holds {lock.name})") from None
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    service.log(f"serving {', '.join(service.policy.assignments)} from {service.inbound} (policy {service.policy})")
    while True:
        service.step()
        if once or stop:
            break
        deadline = time.monotonic() + poll
        while time.monotonic() < deadline and not stop:
            time.sleep(0.2)
    service.log("stopped")
    return 0
