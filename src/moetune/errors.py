"""The one exception type users see.

Every error a user can cause (unknown model, illegal layout, malformed file) is raised as
``MoetuneError`` with a single line naming what is wrong and how to fix it. The CLI prints that
line and exits non-zero; it never shows a traceback for these.
"""


class MoetuneError(ValueError):
    """A user-facing error: one line, names the field and the fix."""

    exit_code = 2

    def __init__(self, message: str, same_as: tuple[str, ...] = (), flags_fix: str = "", file_fields: str = ""):
        super().__init__(" ".join((f"{message}; {flags_fix}" if flags_fix else message).split()))
        # the problem apart from a fix worded in command-line flags ("change --gbs or --mbs"): a reader of a saved
        # file, where no flag applies, words the fix for the file instead (planner/from_json.py _named)
        # (file_fields: the saved result's fields that fix says to edit, "workload (global_batch_size, ...)")
        self.problem, self.flags_fix, self.file_fields = " ".join(message.split()), flags_fix, file_fields
        # the config-only rules (rules.yaml ids) that say what this error says: `check --model` reports the layout's
        # error and leaves them out, by id rather than by the message's wording
        self.same_as = same_as


class UnsupportedPrecision(MoetuneError):
    """The GPU has no Tensor Core format for the precision asked (the rule table's precision.* errors say the same
    of a config, so `check` reports those rather than this)."""
