"""``docqa``: natural questions with short answers about real documents that ship with Python 3.11.

The documents were written for Python's users, not for this tool: the ``re`` module's docstring, Python's
``LICENSE.txt`` and four Language and Library Reference topics from ``pydoc_data.topics`` (the text ``help()``
shows). They are read from the running Python, never copied here, and each is pinned by the SHA-256 of its text:
another Python release (other wording, other offsets) stops the task with an error instead of changing it quietly.

Each answer is a name, a word or a number that appears verbatim in its document at one place: either its words
occur once in the whole document (matched as whole words, case-insensitively, as the scorer reads them), or the
question carries an ``anchor``, a passage that occurs once and holds the answer, and asks about what only that passage
says (``tests/test_docqa.py`` checks both against the text). The answer's depth is where that place lies (0 = start,
1 = end). Answers are scored by :mod:`.scoring`: a number as a ``code`` (every number of its digits the answer
names), a name or phrase as ``name`` (the set of the question's ``vocabulary`` words the answer names must be exactly
the answer's words; the vocabulary holds the near misses a wrong answer would give).

A document's prompt fits one of the bench's lengths (2048, 4096 or 8192 tokens of the default model); at a length
the task asks the questions of the documents of that length. Questions are split into ``tune`` and ``test`` by a hash
of their text (a third tune), so settings chosen on ``tune`` never saw a reported question; a run draws ``samples``
questions of its split, one from each of ``samples`` equal depth bins, seeded by split, length and seed.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError

KIND = "docqa"
PYTHON = "3.11.7"  # the release whose texts the hashes below pin
NEW_TOKENS = 32  # a name or number and a short sentence around it


@dataclass(frozen=True)
class Source:
    """One document: where the running Python keeps it, its pinned hash and its length class."""

    name: str
    title: str
    length: int  # the bench length its prompt fits (tokens of the default model)
    sha256: str

    def text(self) -> str:
        return _read(self.name)


def _read(name: str) -> str:
    if name == "re_docstring":
        import re as module

        return module.__doc__
    if name == "python_license":
        return (Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                / "LICENSE.txt").read_text(encoding="utf-8")
    from pydoc_data.topics import topics

    return topics[name.removeprefix("topic_")]


SOURCES = {source.name: source for source in (
    Source("re_docstring", "the re module's docstring", 2048,
           "071a0f0129ee0f5fbe37907664cd615be9a5157924e57ca9239256863b6ad822"),
    Source("topic_try", "Language Reference: the try statement", 4096,
           "6e10f45f27dfae99b04f31df1b5852c11d3bca84101d1de7d534983d8852ad66"),
    Source("python_license", "Python's LICENSE.txt", 4096,
           "3b2f81fe21d181c499c59a256c8e1968455d6689d269aa85373bfb6af41da3bf"),
    Source("topic_typesmapping", "Library Reference: mapping types (dict)", 4096,
           "c01ac7fedda682a9d4ed2acdfb7f8f65bb2272882767483dc01f36212c4d4332"),
    Source("topic_debugger", "Library Reference: pdb, the Python debugger", 8192,
           "ef13de02a99ae051d12509585d8534de1fbfb9f3dcf76cac082e07e1878a6c07"),
    Source("topic_string-methods", "Library Reference: string methods", 8192,
           "a96f833a94d067c67ffa2fcce624d0c6b870e095ad69b0f4a3525ca99d3a9d8e"),
)}


@dataclass(frozen=True)
class Question:
    source: str
    question: str
    answer: str  # verbatim in the document
    kind: str = "name"  # "name" (words of ``vocabulary``) or "code" (a number)
    vocabulary: tuple[str, ...] = ()
    anchor: str | None = None  # a passage that occurs once and holds the answer, when the answer's words recur

    @property
    def expected(self) -> tuple[str, ...]:
        """What the scorer must read in a right answer: the number, or the answer's words."""
        return (self.answer,) if self.kind == "code" else tuple(re.findall(r"[A-Za-z]+", self.answer))

    @property
    def split(self) -> str:
        """``tune`` for a third of the questions (by a hash of the question), ``test`` for the rest."""
        return "tune" if hashlib.sha256(self.question.encode("utf-8")).digest()[0] % 3 == 0 else "test"


FLAGS = ("ASCII", "IGNORECASE", "LOCALE", "MULTILINE", "DOTALL", "VERBOSE", "UNICODE")
RE_FUNCTIONS = ("fullmatch", "findall", "finditer", "sub", "subn", "purge")
ERRORS = ("ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "RuntimeError", "UnicodeError",
          "UnicodeEncodeError", "UnicodeDecodeError", "ZeroDivisionError", "AttributeError", "OSError",
          "ArithmeticError", "BaseExceptionGroup", "ExceptionGroup", "BaseException")
MODULES = ("pprint", "shlex", "faulthandler", "traceback", "bdb", "cmd", "inspect", "unicodedata", "locale",
           "codecs", "string", "collections", "reprlib", "argparse")
PDB_COMMANDS = ("tbreak", "whatis", "longlist", "undisplay", "unalias", "retval", "silent", "interact", "pp")
LANGUAGES = ("German", "English", "French", "Greek", "Turkish", "Dutch", "Spanish")
STATES = ("California", "Virginia", "Delaware", "Massachusetts", "Maryland", "Texas")

QUESTIONS: tuple[Question, ...] = (
    # re's docstring (2k)
    Question("re_docstring", "Which programming language's regular expressions does the re module resemble?", "Perl",
             vocabulary=("Perl", "Ruby", "Java", "JavaScript", "PHP", "awk", "sed", "Tcl")),
    Question("re_docstring", r"Besides letters and digits, which character does \w match in ASCII mode? Give its "
             "name.", "underscore", vocabulary=("underscore", "hyphen", "dash", "space", "apostrophe", "period")),
    Question("re_docstring", "Which re function matches a pattern against all of a string?", "fullmatch",
             vocabulary=RE_FUNCTIONS),
    Question("re_docstring", "Which re function is like sub but also returns the number of substitutions made?",
             "subn", vocabulary=RE_FUNCTIONS),
    Question("re_docstring", "Which re function returns an iterator yielding a Match object for each match?",
             "finditer", vocabulary=RE_FUNCTIONS),
    Question("re_docstring", "Which flag makes a pattern match case-insensitively?", "IGNORECASE", vocabulary=FLAGS),
    Question("re_docstring", "Which flag makes ^ match at the beginning of every line?", "MULTILINE",
             vocabulary=FLAGS),
    Question("re_docstring", "Which flag makes . match any character at all, including the newline?", "DOTALL",
             vocabulary=FLAGS),
    Question("re_docstring", "Which flag lets a pattern contain whitespace and comments that are ignored?",
             "VERBOSE", vocabulary=FLAGS),
    # the try statement (4k)
    Question("topic_try", "Until what event do the locals of the frame stay alive when an exception keeps a "
             "reference cycle?", "garbage", vocabulary=("garbage",)),
    Question("topic_try", "In which module is the exception stored while an except clause runs?", "sys",
             vocabulary=MODULES + ("sys", "builtins"), anchor='in the "sys" module, where it can be accessed'),
    Question("topic_try", "In the except* example with a plain exception, which exception gets wrapped in an "
             "exception group?", "BlockingIOError", vocabulary=ERRORS + ("BlockingIOError",),
             anchor="ExceptionGroup('', (BlockingIOError()))"),
    Question("topic_try", "Which clause runs when control leaves the try suite with no exception, return, continue "
             "or break?", "else", vocabulary=("else", "finally", "except"), anchor='The optional "else" clause is'),
    Question("topic_try", "The type in an except* clause cannot be a subclass of which class?", "BaseExceptionGroup",
             vocabulary=ERRORS),
    Question("topic_try", "What happens to the saved exception when the finally clause executes a return?",
             "discarded", vocabulary=("discarded", "suppressed", "ignored", "cleared", "reraised")),
    Question("topic_try", "In the example where the finally clause returns after 1/0, what does the function "
             "return?", "42", kind="code", anchor="return 42"),
    # Python's LICENSE.txt (4k)
    Question("python_license", "What is the family name of the person who created Python?", "Rossum",
             vocabulary=("Rossum", "Stallman", "Peters", "Warsaw", "Drake", "Hettinger")),
    Question("python_license", "Python was created as a successor of which language?", "ABC",
             vocabulary=("ABC", "Modula", "Pascal", "Lisp", "SETL", "Perl")),
    Question("python_license", "In which month of 2000 did the PythonLabs team move to Digital Creations?", "October",
             vocabulary=("January", "February", "March", "April", "June", "July", "August", "September",
                         "October", "November", "December")),
    Question("python_license", "In which city is the office of BeOpen.com?", "Santa Clara",
             vocabulary=("Santa", "Clara", "Reston", "Amsterdam", "Cupertino", "Jose")),
    Question("python_license", "What is the ZIP code of BeOpen.com's office?", "95051", kind="code"),
    Question("python_license", "The law of which state governs the BeOpen Python license agreement?", "California",
             vocabulary=STATES),
    Question("python_license", "On which road is the office of the Corporation for National Research Initiatives?",
             "Preston", vocabulary=("Preston", "Saratoga", "Sunset", "Wilson")),
    Question("python_license", "What is the ZIP code of CNRI's office?", "20191", kind="code"),
    Question("python_license", "In which city is Stichting Mathematisch Centrum?", "Amsterdam",
             vocabulary=("Amsterdam", "Rotterdam", "Utrecht", "Reston", "Leiden", "Delft")),
    Question("python_license", "Who said that Python 1.6.1 is not GPL-compatible?", "Richard Stallman",
             vocabulary=("Richard", "Stallman", "Guido", "Rossum"), anchor="According to Richard Stallman"),
    # mapping types (4k)
    Question("topic_typesmapping", "What does dict.fromkeys() use as the value when none is given?", "None",
             vocabulary=("None", "True", "False", "zero"), anchor='*value* defaults to "None"'),
    Question("topic_typesmapping", "Which subclass of dict in collections defines its own __missing__ method?",
             "defaultdict", vocabulary=("defaultdict", "OrderedDict", "ChainMap", "UserDict")),
    Question("topic_typesmapping", "In which order does popitem() return the pairs of a dictionary?", "LIFO",
             vocabulary=("LIFO", "FIFO"), anchor="Pairs are returned in LIFO"),
    Question("topic_typesmapping", "Which exception do order comparisons such as < between two dictionaries raise?",
             "TypeError", vocabulary=ERRORS),
    Question("topic_typesmapping", "In which implementation of Python was insertion order an implementation detail "
             "from 3.6?", "CPython", vocabulary=("CPython", "PyPy", "Jython", "IronPython")),
    Question("topic_typesmapping", "Which exception may be raised when iterating a dictionary view while adding or "
             "deleting entries?", "RuntimeError", vocabulary=ERRORS),
    Question("topic_typesmapping", "Which function pairs a dictionary's values with its keys in the view example?",
             "zip", vocabulary=("zip", "map", "enumerate", "reversed"), anchor='pairs using "zip()"'),
    Question("topic_typesmapping", "Which type of the types module creates a read-only view of a dict?",
             "MappingProxyType", vocabulary=("MappingProxyType", "SimpleNamespace", "frozenset"),
             anchor='"types.MappingProxyType" can be used to create a read-only view'),
    # pdb (8k)
    Question("topic_debugger", "Which module is used to dump Python tracebacks on a fault or after a timeout?",
             "faulthandler", vocabulary=MODULES),
    Question("topic_debugger", "Which module, besides cmd, does the debugger's extension interface use?", "bdb",
             vocabulary=MODULES),
    Question("topic_debugger", "Which exception does the crashed program in the post-mortem example raise?",
             "ZeroDivisionError", vocabulary=ERRORS),
    Question("topic_debugger", "Which framework's modules are skipped in the example call that enables tracing with "
             "skip?", "django", vocabulary=("django", "flask", "numpy", "pytest", "requests")),
    Question("topic_debugger", "Which argument of Pdb, when set to true, keeps it from touching the SIGINT handler?",
             "nosigint", vocabulary=("nosigint", "readrc", "skip", "stdin"), anchor="set *nosigint* to true"),
    Question("topic_debugger", "Which argument of Pdb controls whether it loads .pdbrc files?", "readrc",
             vocabulary=("nosigint", "readrc", "skip", "stdin"), anchor="The *readrc* argument defaults"),
    Question("topic_debugger", "Which command sets a breakpoint that is removed automatically when it is first hit?",
             "tbreak", vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which command in a breakpoint's command list stops the usual message about stopping "
             "at a breakpoint?", "silent", vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which command lists all source code for the current function or frame?", "longlist",
             vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which module does the pp command use to pretty-print a value?", "pprint",
             vocabulary=MODULES),
    Question("topic_debugger", "Which command prints the type of an expression?", "whatis", vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which command stops displaying an expression in the current frame?", "undisplay",
             vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which command deletes an alias?", "unalias", vocabulary=PDB_COMMANDS),
    Question("topic_debugger", "Which module splits the arguments given to the restart command?", "shlex",
             vocabulary=MODULES),
    Question("topic_debugger", "Which command prints the return value for the last return of the current function?",
             "retval", vocabulary=PDB_COMMANDS),
    # string methods (8k)
    Question("topic_string-methods", "Which language's lowercase letter ß is the example for casefold()?", "German",
             vocabulary=LANGUAGES),
    Question("topic_string-methods", "Which method converts the letter ß to ss?", "casefold",
             vocabulary=("casefold", "lower", "upper", "swapcase"), anchor='"casefold()" converts it to'),
    Question("topic_string-methods", "Which exception does str.encode() raise on an encoding error when errors is "
             "strict?", "UnicodeError", vocabulary=ERRORS),
    Question("topic_string-methods", "What tab size does expandtabs() use by default?", "8", kind="code",
             anchor="(default is 8, giving"),
    Question("topic_string-methods", "Which numbers are the example of digits that cannot form numbers in base 10?",
             "Kharosthi", vocabulary=("Kharosthi", "Roman", "Arabic", "Devanagari", "Chinese", "Thai")),
    Question("topic_string-methods", "Which module gives access to the Unicode character database?", "unicodedata",
             vocabulary=MODULES),
    Question("topic_string-methods", "Which string method returns True if all characters in the string are "
             "printable?", "isprintable", vocabulary=("isprintable", "isascii", "isalnum", "isidentifier")),
    Question("topic_string-methods", "Which exception does str.join() raise when the iterable holds non-string "
             "values?", "TypeError", vocabulary=ERRORS),
    Question("topic_string-methods", "Which string method returns the string left justified in a string of a given "
             "width?", "ljust", vocabulary=("ljust", "rjust", "center", "zfill")),
    Question("topic_string-methods", "Which string method splits at the first occurrence of a separator and returns "
             "a 3-tuple?", "partition", vocabulary=("partition", "rpartition", "split", "rsplit")),
    Question("topic_string-methods", "Which string method is like rfind() but raises ValueError when the substring "
             "is not found?", "rindex", vocabulary=("rindex", "index", "rfind")),
    Question("topic_string-methods", "Which string method splits at the last occurrence of a separator and returns "
             "a 3-tuple?", "rpartition", vocabulary=("partition", "rpartition", "split", "rsplit")),
    Question("topic_string-methods", "Which string method tells whether a string starts with a given prefix?",
             "startswith", vocabulary=("startswith", "endswith", "removeprefix")),
    Question("topic_string-methods", "Which exception should a translation table raise to map a character to "
             "itself?", "LookupError", vocabulary=ERRORS),
)


@functools.cache
def document(name: str) -> str:
    """The text of one source, checked against its pinned SHA-256."""
    source = SOURCES[name]
    try:
        text = source.text()
    except (OSError, KeyError, ImportError) as error:
        raise UserError(f"the docqa task reads {source.title} from Python {PYTHON}; this Python has none "
                        f"({error})") from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != source.sha256:
        raise UserError(f"the docqa task needs {source.title} as Python {PYTHON} ships it; this Python's "
                        f"(Python {sys.version.split()[0]}) differs (SHA-256 {digest[:12]}...)")
    return text


def location(question: Question) -> int:
    """Where the answer lies in its document (a character offset): in its anchor, or at its one occurrence."""
    text = document(question.source)
    if question.anchor is not None:
        return text.index(question.anchor) + question.anchor.index(question.answer)
    return text.index(question.answer)


def depth(question: Question) -> float:
    return location(question) / len(document(question.source))


def lengths() -> tuple[int, ...]:
    """The bench lengths that have documents."""
    return tuple(sorted({source.length for source in SOURCES.values()}))


def draw(length: int, samples: int, split: str, seed: int = 0) -> list[Question]:
    """``samples`` questions of ``split`` about the documents of ``length``: the pool sorted by depth is cut into
    ``samples`` equal bins and one question drawn from each (all of them when the pool is smaller), returned in
    document order so the questions about one document follow each other."""
    pool = sorted((q for q in QUESTIONS if SOURCES[q.source].length == length and q.split == split),
                  key=lambda q: (depth(q), q.question))
    if samples < len(pool):
        rng = random.Random(f"{split}/{KIND}/{length}/{seed}")
        bins = [pool[len(pool) * i // samples:len(pool) * (i + 1) // samples] for i in range(samples)]
        pool = [rng.choice(part) for part in bins]
    order = list(SOURCES)
    return sorted(pool, key=lambda q: (order.index(q.source), depth(q)))
