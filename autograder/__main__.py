"""Command line of the course tool; ``python -m autograder --help`` lists the commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnlab.lessons import LESSONS, lesson


def _course(value: str) -> Path:
    return Path(value).resolve()


def main(argv: list[str] | None = None) -> int:
    from autograder.course import DEFAULT_COURSE

    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser("release", help="regenerate notebooks/ and the library stubs from solutions/")
    release.add_argument("--check", action="store_true", help="write nothing; exit 1 and show what differs")

    build = commands.add_parser("build", help="make the nbgrader course directory (source and release)")
    build.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    build.add_argument("--lesson", action="append", help="only this lesson (number or slug); repeatable")

    grade = commands.add_parser("grade", help="autograde collected submissions and export grades to CSV")
    grade.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    grade.add_argument("--lesson", help="only this lesson (number or slug)")
    grade.add_argument("--cell-timeout", type=int, help="seconds a cell may run (default: the lesson's budget)")
    grade.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    grade.add_argument("--db-url", help="the gradebook's database, shared by several graders, e.g. "
                       "postgresql://user:password@host/gradebook (default: nbgrader's CourseDirectory.db_url, "
                       "else the course's gradebook.db)")

    feedback = commands.add_parser("feedback", help="HTML feedback without hidden tests")
    feedback.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    feedback.add_argument("--lesson", action="append", help="only this lesson (number or slug); repeatable")

    bench = commands.add_parser("benchmark", help="seconds per submission, serial and parallel, same grades")
    bench.add_argument("--submissions", type=int, default=6)
    bench.add_argument("--jobs", type=int, default=2)
    bench.add_argument("--lesson", default="02")

    args = parser.parse_args(argv)
    if args.command == "benchmark":
        from autograder.benchmark import benchmark

        return benchmark(args.submissions, args.jobs, args.lesson)
    if args.command == "release":
        from autograder.release import release as run_release

        return run_release(check=args.check)
    if args.command == "build":
        from autograder.build import build as run_build

        chosen = [lesson(key) for key in args.lesson] if args.lesson else None
        return run_build(args.course, chosen)
    if args.command == "grade":
        from autograder.grade import grade as run_grade

        return run_grade(args.course, lesson(args.lesson).slug if args.lesson else None, args.cell_timeout, args.jobs,
                         db_url=args.db_url)
    from autograder.feedback import feedback as run_feedback

    chosen = [lesson(key) for key in args.lesson] if args.lesson else [l for l in LESSONS if l.graded]
    return run_feedback(args.course, [l.slug for l in chosen])


if __name__ == "__main__":
    sys.exit(main())
