"""sandbox-py: shows what the sandbox denies a plugin.

For the first change of each batch it tries to read a file, list a directory, read the
environment and the arguments, open a TCP connection and resolve a name, and lands one row
per attempt in its declared output `attempts`: what it tried, and `denied: <why>` or
`allowed: <what it got>`. Every change itself lands as it came. The tests hold that each
attempt is denied.

Setting `spin = "true"` makes `process` loop forever instead, and `hog = "true"` makes it
allocate without bound, so the tests can show the time limit and the memory cap stopping a
Python plugin.
"""

# Bundled so that resolving a name reaches the network layer instead of failing on a missing
# codec first.
import encodings.idna  # noqa: F401
import os
import socket
import sys
from typing import Callable, List, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types as t

NAME = "sandbox-py"
VERSION = "1.0.0"
OUTPUT = "attempts"

# Loop forever in `process` (the `spin` setting), or allocate until the memory cap stops it
# (`hog`).
SPIN = False
HOG = False


def attempt(what: Callable[[], object]) -> str:
    try:
        got = what()
    except BaseException as error:  # anything the runtime raises is a denial
        return f"denied: {type(error).__name__}: {error}"
    if not got:
        return "denied: empty"
    return f"allowed: {got!r}"


def read_file() -> str:
    with open("/etc/hostname") as f:
        return f.read()


def connect() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(("127.0.0.1", 5432))
        return "connected"


def attempts() -> List[Tuple[str, str]]:
    return [
        ("read /etc/hostname", attempt(read_file)),
        ("list the working directory", attempt(lambda: os.listdir("."))),
        ("read the environment", attempt(lambda: dict(os.environ))),
        ("read the arguments", attempt(lambda: [a for a in sys.argv if a])),
        ("connect to 127.0.0.1:5432", attempt(connect)),
        ("resolve localhost", attempt(lambda: socket.getaddrinfo("localhost", 80))),
    ]


def text_column(name: str) -> t.OutputColumn:
    return t.OutputColumn(name=name, type=t.ScalarType.TEXT, array=False, numeric=None,
                          nullable=False, key=False)


class Plugin(exports.Plugin):
    def describe(self) -> t.PluginInfo:
        return t.PluginInfo(name=NAME, version=VERSION)

    def init(self, config: List[Tuple[str, str]]) -> t.Setup:
        global SPIN, HOG
        for key, value in config:
            if key == "spin" and value in ("true", "false"):
                SPIN = value == "true"
            elif key == "hog" and value in ("true", "false"):
                HOG = value == "true"
            else:
                raise Err(f"{NAME}: unknown setting `{key}` = {value!r}; "
                          "it takes spin = \"true\" or hog = \"true\"")
        output = t.Output(name=OUTPUT, columns=[text_column("attempt"), text_column("outcome")])
        interest = t.Interest(columns=[], old_images=False, messages=False,
                              whole_transactions=False)
        return t.Setup(outputs=[output], reshapes=[], interest=interest)

    def process(self, batch: t.Batch) -> t.Processed:
        n = 0
        while SPIN:
            n += 1
        hoard = []
        while HOG:
            hoard.append(bytearray(1 << 20))
        emits: List[t.Emit] = []
        first = None
        for ti, transaction in enumerate(batch.transactions):
            for ci in range(len(transaction.changes)):
                at = t.ChangeRef(transaction=ti, change=ci)
                emits.append(t.Emit_Keep(at))
                if first is None:
                    first = at
        if first is not None:
            for sub, (what, outcome) in enumerate(attempts()):
                emits.append(t.Emit_Row(t.Row(
                    target=t.Target_Declared(OUTPUT),
                    origin=t.Origin_Change(first),
                    sub=sub,
                    op=t.Op.INSERT,
                    values=[t.Value_Text(what), t.Value_Text(outcome)],
                    old=None,
                )))
        return t.Processed(emits=emits, rejections=[])
