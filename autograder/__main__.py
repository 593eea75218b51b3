"""Command line of the course tool; ``python -m autograder --help`` lists the commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnlab.lessons import LESSONS, lesson


def _course(value: str) -> Path:
    return Path(value).resolve()


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return seconds


def _gradebook_options(command) -> None:
    """Where the gradebook is (``autograder.gradebook_url``): options shared by grade and feedback."""
    command.add_argument("--db-url", help="the gradebook's database URL, e.g. postgresql://grader@dbhost/gradebook "
                         "(shared by several graders); leave its password out (~/.pgpass): every user of the "
                         "machine can read a command line")
    command.add_argument("--db-url-file", type=Path, help="a file, readable by you alone (chmod 600), holding the "
                         "gradebook's URL")
    command.epilog = ("Without --db-url or --db-url-file the gradebook's URL comes from the environment variable "
                      "ATTNLAB_GRADEBOOK_URL, else nbgrader's CourseDirectory.db_url, else the course's gradebook.db.")


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
    grade.add_argument("--share-cores", action="store_true", help="give each submission's kernel and workers "
                       "cores / jobs threads (OMP_NUM_THREADS and its kin) instead of torch's default")
    grade.add_argument("--submission-seconds", type=_seconds, help="time budget of one submission, notebook and "
                       "trusted checks together (default: the lesson's, 300 s unless autograder/budget.py says more)")
    _gradebook_options(grade)

    feedback = commands.add_parser("feedback", help="HTML feedback without hidden tests")
    feedback.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    feedback.add_argument("--lesson", action="append", help="only this lesson (number or slug); repeatable")
    _gradebook_options(feedback)

    report = commands.add_parser("report", help="the class report: pass rates, failures, grading time, notes "
                                 "(CSV and one HTML page in COURSE/report/)")
    report.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    report.add_argument("--lesson", action="append", help="only this lesson (number or slug); repeatable")
    _gradebook_options(report)

    export = commands.add_parser("export", help="grades for an LMS: one row per learner, one column per lesson")
    export.add_argument("--course", type=_course, default=DEFAULT_COURSE)
    export.add_argument("--format", choices=("canvas", "moodle", "csv"), default="csv",
                        help="column layout: Canvas's or Moodle's gradebook import, or plain CSV")
    export.add_argument("--per-exercise", action="store_true", help="also one column per graded cell")
    export.add_argument("--out", type=Path, help="the file to write (default COURSE/grades-FORMAT.csv)")
    export.add_argument("--lesson", action="append", help="only this lesson (number or slug); repeatable")
    export.add_argument("--canvas-roster", type=Path, help="a gradebook exported from Canvas: its Student, ID, "
                        "SIS User ID and Section are copied to the learner whose SIS Login ID is their nbgrader id")
    _gradebook_options(export)

    bench = commands.add_parser("benchmark", help="seconds per submission, serial and parallel, same grades")
    bench.add_argument("--submissions", type=int, default=6)
    bench.add_argument("--jobs", type=int, default=2)
    bench.add_argument("--lesson", default="02")
    bench.add_argument("--class-scale", action="store_true", help="grade one generated class (honest, blank, "
                       "mistakes) once with --jobs: submissions per minute, peak memory, load, none lost")

    args = parser.parse_args(argv)
    if args.command == "benchmark" and args.class_scale:
        from autograder.class_scale import class_benchmark

        return class_benchmark(args.submissions, args.jobs, args.lesson)
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
    if args.command in ("grade", "feedback", "report", "export") and args.db_url:
        from autograder.gradebook_url import GradebookURLError, command_line_warning, parse

        try:
            parse(args.db_url, "--db-url")
        except GradebookURLError as error:
            parser.error(str(error))
        warning = command_line_warning(args.db_url)
        if warning:
            print(warning, file=sys.stderr)
    if args.command == "grade":
        from autograder.grade import Settings, threads_per_submission
        from autograder.grade import grade as run_grade

        settings = Settings(cell_timeout=args.cell_timeout, submission_wall_s=args.submission_seconds,
                            threads=threads_per_submission(args.jobs) if args.share_cores else None)
        return run_grade(args.course, lesson(args.lesson).slug if args.lesson else None, jobs=args.jobs,
                         settings=settings, db_url=args.db_url, db_url_file=args.db_url_file)
    if args.command == "report":
        from autograder.report import report as run_report

        return run_report(args.course, args.lesson, db_url=args.db_url, db_url_file=args.db_url_file)
    if args.command == "export":
        from autograder.lms_export import export as run_export

        return run_export(args.course, args.format, args.out, args.per_exercise, args.lesson,
                          db_url=args.db_url, db_url_file=args.db_url_file, roster=args.canvas_roster)
    from autograder.feedback import feedback as run_feedback

    chosen = [lesson(key) for key in args.lesson] if args.lesson else [l for l in LESSONS if l.graded]
    return run_feedback(args.course, [l.slug for l in chosen], db_url=args.db_url, db_url_file=args.db_url_file)


if __name__ == "__main__":
    sys.exit(main())
