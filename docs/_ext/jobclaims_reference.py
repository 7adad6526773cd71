"""Reference text taken from the code, so the pages cannot drift from it.

``{jobclaims-help} jobclaims_status`` renders a management command's
``--help``, as argparse prints it from the command's own arguments;
``{jobclaims-help} JobCommand`` renders the options every job has;
``{jobclaims-job-options}`` the class attributes a job may set, from the
``#:`` comment above each in ``JobCommand``.
"""

from __future__ import annotations

import os
from typing import Any

from docutils import nodes
from pygments.lexers.special import TextLexer
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def command_help(name: str) -> str:
    """The ``--help`` of the jobclaims command ``name``, or of any JobCommand."""
    from django.core.management import load_command_class

    if name == "JobCommand":
        from jobclaims import JobCommand

        command: Any = JobCommand()
        prog = "your_job"
    else:
        command = load_command_class("jobclaims", name)
        prog = name
    # argparse wraps to the terminal's width: a fixed one keeps builds alike.
    os.environ["COLUMNS"] = "100"
    return str(command.create_parser("manage.py", prog).format_help())


class CommandHelp(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        text = command_help(self.arguments[0])
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def job_options() -> list[tuple[str, str, str]]:
    """``JobCommand``'s documented class attributes: (name, default, meaning), in source order."""
    from sphinx.pycode import ModuleAnalyzer

    from jobclaims import JobCommand

    analyzer = ModuleAnalyzer.for_module("jobclaims.jobs.commands")
    documented = analyzer.find_attr_docs()
    names = sorted(
        (name for cls, name in documented if cls == "JobCommand"),
        key=lambda name: analyzer.tagorder[f"JobCommand.{name}"],
    )
    return [
        (name, repr(getattr(JobCommand, name)), " ".join(documented["JobCommand", name]).strip())
        for name in names
    ]


PIPE, ESCAPED_PIPE = "|", "\\|"


class JobOptions(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        # A pipe in a meaning would end its table cell.
        rows = [
            f"| `{name}` | `{default}` | {meaning.replace(PIPE, ESCAPED_PIPE)} |"
            for name, default, meaning in job_options()
        ]
        table = "\n".join(["| attribute | default | meaning |", "| --- | --- | --- |", *rows])
        return self.parse_text_to_nodes(table)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("jobclaims-help", CommandHelp)
    app.add_directive("jobclaims-job-options", JobOptions)
    # Crontab lines in the recipes: Pygments has no lexer for them.
    app.add_lexer("cron", TextLexer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
