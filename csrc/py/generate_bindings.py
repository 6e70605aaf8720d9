"""Generate the kernel bindings from the specification table kernel_table.py.

Each kernel's signature is written once, in the table: from it come
  * the C shell ``py_<name>`` (argument parsing, the array checks the table
    lists, the outputs, the call and the result) and the family's PyMethodDef
    table, in ``csrc/py/generated/<family>.c`` (not committed; written by
    setup.py's build_ext), which first includes the family's hand-written
    ``bind_<family>.c`` (its custom checks and custom bodies), and
    ``csrc/py/generated/families.h``, the families module.c joins;
  * the pure pass-through Python functions with their type hints and
    docstrings, in ``ctransformer/kernels/_bindings.py`` (committed, so that
    help() and tracebacks show real code; tests/test_bindings_table.py checks
    that it is up to date).

    python3 csrc/py/generate_bindings.py            # write both
    python3 csrc/py/generate_bindings.py --check    # exit 1 if _bindings.py is stale

The table's vocabulary (Kernel, In, InPlace, Grad, Out, C, Call, Return) is defined
here; see kernel_table.py for what each step emits.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PY_OUT = ROOT / "ctransformer" / "kernels" / "_bindings.py"
C_OUT = HERE / "generated"

# ---------------------------------------------------------------- arguments

# kind -> (PyArg format unit, C type, Python hint)
KINDS = {
    "array": ("O", "PyObject *", "np.ndarray"),
    "array?": ("O", "PyObject *", "Optional[np.ndarray]"),
    "object": ("O", "PyObject *", "object"),
    "bool": ("p", "int ", "bool"),
    "float": ("d", "double ", "float"),
    "str": ("s", "const char *", "str"),
    "int": ("L", "long long ", "int"),
    "size": ("n", "Py_ssize_t ", "int"),
    "uint64": ("K", "unsigned long long ", "int"),
}
C_KEYWORDS = {"double", "float", "int", "char", "long", "short", "default", "case", "register"}


@dataclasses.dataclass
class Arg:
    name: str
    kind: str = "array"
    default: Optional[str] = None  # Python literal, None = required
    hint: Optional[str] = None

    @property
    def fmt(self) -> str:
        return KINDS[self.kind][0]

    @property
    def ctype(self) -> str:
        return KINDS[self.kind][1]

    @property
    def pyhint(self) -> str:
        return self.hint or KINDS[self.kind][2]

    @property
    def cvar(self) -> str:
        """The C variable holding the parsed value (o_<name> for objects)."""
        if self.fmt == "O":
            return "o_" + self.name
        return self.name + "_" if self.name in C_KEYWORDS else self.name

    @property
    def cdefault(self) -> Optional[str]:
        d = self.default
        if d is None:
            return None
        if d == "None":
            return "Py_None"
        if self.kind == "object":
            return "NULL"  # not given: the custom C applies the default
        if d in ("True", "False"):
            return "1" if d == "True" else "0"
        if d[0] in "'\"":
            return '"' + d[1:-1] + '"'
        return d


ARG_RE = re.compile(r"^\s*(\w+)\s*(?::\s*([\w?]+)\s*(?:\[(.*)\])?)?\s*(?:=\s*(.+?))?\s*$")


def parse_args(spec: str) -> List[Arg]:
    """'x, weight: array? = None, eps: float = 1e-5, pos: object[Union[int, np.ndarray]]'"""
    args = []
    for part in split_top(spec):
        m = ARG_RE.match(part)
        if not m:
            raise ValueError(f"bad argument spec {part!r}")
        name, kind, hint, default = m.groups()
        if (kind or "array") not in KINDS:
            raise ValueError(f"unknown kind {kind!r} in {part!r}")
        args.append(Arg(name, kind or "array", default, hint))
    return args


def split_top(spec: str) -> List[str]:
    """Split at commas outside brackets and braces."""
    parts, depth, cur = [], 0, ""
    for ch in spec:
        if ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


# ---------------------------------------------------------------- body steps
DTYPES = {"float": "CT_ANY_FLOAT", "bool": "NPY_BOOL", "ids": "CT_IDS", "f64": "NPY_FLOAT64", "i64": "NPY_INT64",
          "t": "t"}


def dim(axis: Union[int, str], expected: str, what: str) -> str:
    """Check a.shape[axis] == expected (a C expression)."""
    return f'ct_check_dim(@, fn, "@", {axis}, {expected}, "{what}")'


def like(ref: str, what: str, ndim: Optional[str] = None, same_ndim: bool = False) -> str:
    """Check a.shape[:ndim] == ref.shape[:ndim] (ndim default: all of ref's;
    same_ndim: a must also have ref's number of dimensions)."""
    n = ndim if ndim is not None else f"PyArray_NDIM({ref})"
    return f'ct_check_dims(@, fn, "@", {n}, PyArray_DIMS({ref}), "{what}", {int(same_ndim)})'


@dataclasses.dataclass
class In:
    """An input array: ct_input with a dtype (float: float32 or float64, and
    it defines `t` and `nd`; t: the dtype of that one; bool, ids, f64) and
    an ndim (n, (lo, hi) with hi -1 for no limit, or C expressions), then
    the checks (dim / like / C expressions with @ for the array)."""
    name: str
    dtype: str = "t"
    ndim: Union[int, str, Tuple] = -1
    checks: Sequence[str] = ()
    none_ok: bool = False
    arg: Optional[str] = None  # argument name when it differs from the C variable


@dataclasses.dataclass
class InPlace:
    """An array written in place (ct_inplace: C-contiguous, writeable, no
    overlap with the others): dtype as for In ("float" defines t and nd);
    exact shape of `like` when given; `optional` (a C condition) lets it
    be None (NULL); `when` (a C condition) says whether it is read at all;
    then the checks, as for In."""
    name: str
    dtype: str = "t"
    like: Optional[str] = None
    optional: str = "0"
    when: Optional[str] = None
    checks: Sequence[str] = ()


@dataclasses.dataclass
class Grad:
    """A gradient (accumulated into when the caller passes it, else fresh):
    shape from an array (`like`) or (ndim, dims) C expressions."""
    name: str
    like: Optional[str] = None
    shape: Optional[Tuple[str, str]] = None
    when: Optional[str] = None
    zero_fill: str = "1"
    arg: Optional[str] = None  # its argument (None: never passed in)


@dataclasses.dataclass
class Out:
    """A new output array (uninitialised unless zeros): shape from an array
    (`like`) or (ndim, dims) C expressions; dtype t unless given."""
    name: str
    like: Optional[str] = None
    shape: Optional[Tuple[str, str]] = None
    dtype: str = "t"
    zeros: bool = False
    when: Optional[str] = None


@dataclasses.dataclass
class C:
    """Hand-written C lines (may `goto fail`); `arrays` names the arrays they
    declare, which Call then passes as their data."""
    code: str
    arrays: Sequence[str] = ()


@dataclasses.dataclass
class Call:
    """The kernel call: NAME_f32 / NAME_f64 by t, arrays passed as their data
    (NULL for a NULL array), other arguments as written."""
    kernel: str
    args: str
    alloc: bool = False  # the kernel may fail with out of memory


@dataclasses.dataclass
class Kernel:
    name: str
    family: str
    args: str
    doc: str
    returns: str
    body: Optional[list] = None  # None: a custom body NAME_impl(const NAME_args *, fn) in bind_<family>.c
    python: bool = True  # generate the Python pass-through
    cdoc: Optional[str] = None  # the PyMethodDef summary when it differs from the doc's first line

    @property
    def parsed(self) -> List[Arg]:
        return parse_args(self.args)


# ---------------------------------------------------------------- C output

def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def format_string(k: Kernel) -> str:
    out, optional = "", False
    for a in k.parsed:
        if a.default is not None and not optional:
            out += "|"
            optional = True
        out += a.fmt
    return out + ":" + k.name


def parse_call(k: Kernel, target: str) -> List[str]:
    """Declarations and the ct_parse_args call into `target` variables."""
    names = ", ".join(f'"{a.name}"' for a in k.parsed)
    ptrs = ", ".join(f"&{target}{a.cvar}" for a in k.parsed)
    return [f"static char *names[] = {{{names}, NULL}};",
            f'if (!ct_parse_args(args, kw, "{format_string(k)}", names, {ptrs}))',
            "    return NULL;"]


def declare_args(k: Kernel) -> List[str]:
    lines = []
    for a in k.parsed:
        init = f" = {a.cdefault}" if a.cdefault is not None else (" = NULL" if a.fmt == "O" else "")
        lines.append(f"{a.ctype}{a.cvar}{init};")
    return lines


def emit_in(step: In, arrays: dict, k: Kernel) -> List[str]:
    arg = step.arg or step.name
    if isinstance(step.ndim, tuple):
        lo, hi = step.ndim
    elif step.ndim == -1:
        lo, hi = 0, -1
    else:
        lo = hi = step.ndim
    lines = [f'PyArrayObject *{step.name} = ct_input(&held, o_{arg}, fn, "{arg}", {DTYPES[step.dtype]}, '
             f"{lo}, {hi}, {int(step.none_ok)});"]
    checks = " || ".join(c.replace('"@"', f'"{arg}"').replace("@", step.name) for c in step.checks)
    if step.none_ok:
        cond = "PyErr_Occurred()" + (f" || ({step.name} && ({checks}))" if checks else "")
    else:
        cond = f"{step.name} == NULL" + (f" || {checks}" if checks else "")
    lines.append(f"if ({cond}) goto fail;")
    if step.dtype == "float":
        lines.append(f"int t = PyArray_TYPE({step.name}), nd = PyArray_NDIM({step.name});")
        lines.append("(void)nd;")
    arrays[step.name] = True
    return lines


def emit_inplace(step: InPlace, arrays: dict) -> List[str]:
    # the size too: a 0-d `like` has no dims pointer, which ct_inplace reads as "any shape"
    shape = (f"PyArray_NDIM({step.like}), PyArray_DIMS({step.like}), PyArray_SIZE({step.like})" if step.like
             else "0, NULL, -1")
    make = f'ct_inplace(&held, o_{step.name}, fn, "{step.name}", {DTYPES[step.dtype]}, {shape}, {step.optional})'

    checks = " || ".join(c.replace('"@"', f'"{step.name}"').replace("@", step.name) for c in step.checks)
    cond = f"({step.name} == NULL && PyErr_Occurred())" + (f" || ({step.name} && ({checks}))" if checks else "")
    arrays[step.name] = True
    if step.when is not None:
        lines = [f"PyArrayObject *{step.name} = ({step.when}) ? {make} : NULL;"]
    else:
        lines = [f"PyArrayObject *{step.name} = {make};"]
    lines.append(f"if ({cond}) goto fail;")
    if step.dtype == "float":
        lines += [f"int t = PyArray_TYPE({step.name}), nd = PyArray_NDIM({step.name});", "(void)nd;"]
    return lines


def shape_of(like: Optional[str], shape: Optional[Tuple[str, str]]) -> Tuple[str, str]:
    if like is not None:
        return f"PyArray_NDIM({like})", f"PyArray_DIMS({like})"
    return shape


def new_array(name: str, make: str, when: Optional[str], arrays: dict) -> List[str]:
    """PyArrayObject *name = make (only when `when`, else NULL); NULL from make fails."""
    arrays[name] = True
    if when is None:
        return [f"PyArrayObject *{name} = {make};", f"if ({name} == NULL) goto fail;"]
    return [f"PyArrayObject *{name} = NULL;", f"if (({when}) && !({name} = {make})) goto fail;"]


def emit_grad(step: Grad, arrays: dict) -> List[str]:
    nd, dims = shape_of(step.like, step.shape)
    obj = f"o_{step.arg}" if step.arg else "NULL"
    make = f'ct_grad(&held, {obj}, fn, "{step.arg or step.name}", t, {nd}, {dims}, {step.zero_fill})'
    return new_array(step.name, make, step.when, arrays)


def emit_out(step: Out, arrays: dict) -> List[str]:
    nd, dims = shape_of(step.like, step.shape)
    make = f"ct_{'zeros' if step.zeros else 'empty'}(&held, {DTYPES.get(step.dtype, step.dtype)}, {nd}, {dims})"
    return new_array(step.name, make, step.when, arrays)


def emit_call(step: Call, arrays: dict) -> List[str]:
    args = [a.strip() for a in split_top(step.args)]
    args = [f"CT_DATA({a})" if a in arrays else a for a in args]
    macro = "CT_DISPATCH_ALLOC" if step.alloc else "CT_DISPATCH"
    return [f"{macro}(t, {step.kernel}, {', '.join(args)});"]


def emit_return(names: Sequence[str]) -> str:
    if len(names) == 1:
        return f"ct_ret({names[0]})" if names[0] != "None" else "ct_none()"
    return f"ct_results({len(names)}, {', '.join(names)})"


def generated_body(k: Kernel) -> List[str]:
    lines = [f'const char *fn = "{k.name}";', "ct_held held = {0};"] + declare_args(k) + parse_call(k, "")
    arrays: dict = {}
    result = None
    for step in k.body:
        if isinstance(step, In):
            lines += emit_in(step, arrays, k)
        elif isinstance(step, InPlace):
            lines += emit_inplace(step, arrays)
        elif isinstance(step, Grad):
            lines += emit_grad(step, arrays)
        elif isinstance(step, Out):
            lines += emit_out(step, arrays)
        elif isinstance(step, C):
            lines += textwrap.dedent(step.code).strip("\n").split("\n")
            arrays.update(dict.fromkeys(step.arrays, True))
        elif isinstance(step, Call):
            lines += emit_call(step, arrays)
        elif isinstance(step, (tuple, str)):  # the result: names, or a C expression
            result = step
        else:
            raise TypeError(f"{k.name}: unknown step {step!r}")
    if result is None:
        raise ValueError(f"{k.name}: no result (a tuple of names) in the body")
    ret = result if isinstance(result, str) else emit_return(result)
    lines += [f"return ct_finish(&held, {ret});", "fail:", "return ct_finish(&held, NULL);"]
    return lines


def custom_struct(k: Kernel) -> List[str]:
    fields = [f"    {a.ctype}{a.cvar};" for a in k.parsed]
    return ["typedef struct {"] + fields + [f"}} {k.name}_args;",
                                            f"static PyObject *{k.name}_impl(const {k.name}_args *a, const char *fn);", ""]


def custom_body(k: Kernel) -> List[str]:
    inits = ", ".join(f".{a.cvar} = {a.cdefault}" for a in k.parsed if a.cdefault is not None)
    return [f"{k.name}_args a = {{{inits}}};"] + parse_call(k, "a.") + [f'return {k.name}_impl(&a, "{k.name}");']


def text_signature(k: Kernel) -> str:
    parts = [a.name if a.default is None else f"{a.name}={a.default}" for a in k.parsed]
    return f"{k.name}({', '.join(parts)})"


def method_doc(k: Kernel) -> str:
    summary = k.cdoc or k.doc.strip().split("\n")[0]
    return f"{text_signature(k)}\n--\n\n{summary}"


def render_family_c(family: str, kernels: List[Kernel]) -> str:
    out = ["/* GENERATED by csrc/py/generate_bindings.py from kernel_table.py - do not edit. */",
           '#include "../ct_py.h"', ""]
    for k in kernels:
        if k.body is None:
            out += custom_struct(k)
    out += [f'#include "../bind_{family}.c"', ""]
    for k in kernels:
        body = generated_body(k) if k.body is not None else custom_body(k)
        out += [f"static PyObject *py_{k.name}(PyObject *self, PyObject *args, PyObject *kw)", "{"]
        out += ["    " + line if line and not re.match(r"^\w+:$", line) else line for line in body]
        out += ["}", ""]
    out.append(f"PyMethodDef ct_methods_{family}[] = {{")
    for k in kernels:
        out.append(f"    CT_METHOD({k.name}, {c_string(method_doc(k))}),")
    out += ["    {NULL, NULL, 0, NULL},", "};", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- Python output

def py_signature(k: Kernel) -> str:
    params = []
    for a in k.parsed:
        p = f"{a.name}: {a.pyhint}"
        params.append(p if a.default is None else f"{p} = {a.default}")
    head = f"def {k.name}("
    tail = f") -> {k.returns}:"
    one = head + ", ".join(params) + tail
    if len(one) <= 110:
        return one
    lines, cur = [], head
    indent = " " * len(head)
    for i, p in enumerate(params):
        piece = p + ("," if i < len(params) - 1 else "")
        if len(cur) + len(piece) + 1 > 110 and cur.strip() not in ("", head.strip()):
            lines.append(cur.rstrip())
            cur = indent
        cur += piece + " "
    cur = cur.rstrip()
    if len(cur) + len(tail) > 110:
        lines.append(cur)
        cur = indent[:-1] + " "
    lines.append(cur + tail)
    return "\n".join(lines)


def py_function(k: Kernel) -> str:
    doc = textwrap.indent(textwrap.dedent(k.doc).strip("\n"), "    ")
    call = f"    return _C.{k.name}({', '.join(a.name for a in k.parsed)})"
    return f'{py_signature(k)}\n    """{doc.lstrip()}\n    """\n{call}\n'


def render_python(kernels: List[Kernel]) -> str:
    head = ('"""GENERATED by csrc/py/generate_bindings.py from csrc/py/kernel_table.py - do not edit.\n\n'
            "The kernels whose Python function only passes its arguments to the C\n"
            "extension; each family's module re-exports its own.\n"
            '"""\n'
            "from __future__ import annotations\n\n"
            "from typing import Optional, Sequence, Tuple, Union  # noqa: F401\n\n"
            "import numpy as np\n\n"
            "from .. import _C\n")
    parts = [head]
    for k in kernels:
        if k.python:
            parts.append("\n\n" + py_function(k))
    return "".join(parts)


# ---------------------------------------------------------------- driver

# The table's files, in order: each after the first adds to its KERNELS.  Each
# is imported as binding_<file> (the others import binding_kernel_table),
# names that cannot clash with a caller's modules (the tests have their own
# kernel_table).
TABLE_FILES = ("kernel_table", "kernel_table_decode", "kernel_table_seq")


def load_table():
    sys.modules.setdefault("generate_bindings", sys.modules[__name__])
    modules = []
    for name in TABLE_FILES:
        spec = importlib.util.spec_from_file_location(f"binding_{name}", HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules.append(module)
    return modules[0].KERNELS


def families(kernels: List[Kernel]) -> List[str]:
    seen: List[str] = []
    for k in kernels:
        if k.family not in seen:
            seen.append(k.family)
    return seen


def render_families_h(names: List[str]) -> str:
    lines = ["/* GENERATED by csrc/py/generate_bindings.py - do not edit.  Every kernel family;",
             " * module.c joins their method tables. */", "#define CT_FAMILIES(X) \\"]
    lines += [f"    X({name}) \\" for name in names]
    return "\n".join(lines)[:-2].rstrip() + "\n"


def write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def c_sources(root: Path = ROOT) -> List[str]:
    """The generated binding sources to compile, relative to root (each includes
    its family's hand-written bind_<family>.c)."""
    return [str((C_OUT / f"{family}.c").relative_to(root)) for family in families(load_table())]


def generate_c(out_dir: Path = C_OUT) -> List[Path]:
    kernels = load_table()
    paths = []
    for family in families(kernels):
        path = out_dir / f"{family}.c"
        write_if_changed(path, render_family_c(family, [k for k in kernels if k.family == family]))
        paths.append(path)
    write_if_changed(out_dir / "families.h", render_families_h(families(kernels)))
    return paths


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if _bindings.py is not up to date")
    opts = parser.parse_args(argv)
    text = render_python(load_table())
    if opts.check:
        stale = not PY_OUT.exists() or PY_OUT.read_text() != text
        if stale:
            print(f"{PY_OUT} is stale: run python3 csrc/py/generate_bindings.py", file=sys.stderr)
        return int(stale)
    generate_c()
    write_if_changed(PY_OUT, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
