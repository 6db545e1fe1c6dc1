"""The package's exceptions, and the mapping of a C API failure (its code, else its message) to
the class it belongs to."""
import re


class AttncError(RuntimeError):
    """Base of every attnc error; str(e) is the message."""


class SpecError(AttncError, ValueError):
    """A spec the compiler refused: its message, with file:line:col and a caret."""


class ArgumentError(AttncError, ValueError):
    """Bad call arguments: the message names the argument, with expected vs given."""


class CompileError(AttncError):
    """NVRTC, CUDA driver or no-GPU failures while compiling or launching."""


# The reader's diagnostics: "<file>:<line>:<col>: error:" for YAML, "spec '<name>': error:" for
# the builder (compiler/Spec, include/attnc/diagnostic.h).
_SPEC_MESSAGE = re.compile(r"^(?:[^\n]*:\d+:\d+|spec '[^'\n]*'): error: ")
# The C API's own argument checks (docs/runtime.md, "Launch arguments") and unknown targets.
_ARGUMENT_MESSAGE = re.compile(
    r"^(?:unknown target |(?:Forward|Backward)Args\.|attnc_(?:forward|backward)_args\.|options->)")


def error_from_message(message: str) -> AttncError:
    """The exception a C API error message stands for, with the message kept as it is."""
    if _SPEC_MESSAGE.match(message):
        return SpecError(message)
    if _ARGUMENT_MESSAGE.match(message):
        return ArgumentError(message)
    return CompileError(message)


# The C API's codes (attnc_c.h ATTNC_ERROR_*) with a class of their own; ATTNC_ERROR (1), which a
# library older than the codes returns for everything, is mapped by the message.
_CLASS_OF_CODE = {2: SpecError, 3: ArgumentError, 4: CompileError, 5: CompileError,
                  6: CompileError, 7: CompileError}


def error_from_code(code: int, message: str) -> AttncError:
    """The exception a C API failure stands for: by its code where it has one, else by message."""
    cls = _CLASS_OF_CODE.get(code)
    return cls(message) if cls else error_from_message(message)
