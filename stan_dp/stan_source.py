"""Reading a Stan program's ``transformed data``: values that use all rows, and public overrides.

stan_dp splits a model's log density into one term per data row by building
the model on one row at a time and on no rows (see :mod:`stan_dp.model`).
A ``transformed data`` value computed from every row -- brms centres its
predictors with ``means_X[i] = mean(X[:, i])``, other models z-score with
``sd(x)`` -- breaks that split: the one-row model sees a mean of one row, the
zero-row model a mean of nothing.  It is also private: it is a function of
the whole data set that no privacy mechanism covers.

This module reads the program (never the data) to say which
``transformed data`` variables are such aggregates, and rewrites a program
so that chosen ``transformed data`` variables are read from the data instead
of computed (:func:`override_program`), which is how
``RowModel(..., public_data={...})`` works.

The program is first normalised by stanc itself (``--auto-format`` with the
``deprecations,includes,parentheses,braces,strip-comments``
canonicalisations: one syntax for arrays, every loop and branch body in
braces, no comments, includes inlined); a small scanner then splits the
blocks into statements.  The analysis is syntactic and conservative about
what it names: it is used to *explain* a model that the numerical check
has already refused (or to apply an override the user asked for), never to
refuse a model on its own.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "Statement",
    "TransformedDataReport",
    "PublicOverride",
    "canonical_program",
    "log_transformed_parameters",
    "logit_transformed_parameters",
    "ordered_parameters",
    "scale_parameters",
    "HierarchicalStatement",
    "hierarchical_locations",
    "hierarchical_statements",
    "flat_directions",
    "analyse_transformed_data",
    "override_program",
    "public_data_names",
    "relax_row_count",
]

#: Base types and their rank (0 scalar, 1 vector-like, 2 matrix-like).
BASE_RANK: dict[str, int] = {
    "int": 0, "real": 0, "complex": 0,
    "vector": 1, "row_vector": 1, "simplex": 1, "unit_vector": 1, "sum_to_zero_vector": 1,
    "ordered": 1, "positive_ordered": 1, "complex_vector": 1, "complex_row_vector": 1,
    "matrix": 2, "cov_matrix": 2, "corr_matrix": 2, "cholesky_factor_cov": 2,
    "cholesky_factor_corr": 2, "complex_matrix": 2, "column_stochastic_matrix": 2,
    "row_stochastic_matrix": 2, "sum_to_zero_matrix": 2,
}

#: Functions that combine the elements of their argument; applied to a row
#: variable outside a loop over the rows, they combine rows.
REDUCERS: frozenset[str] = frozenset({
    "mean", "sd", "variance", "sum", "prod", "max", "min", "log_sum_exp", "quantile",
    "sort_asc", "sort_desc", "sort_indices_asc", "sort_indices_desc", "rank",
    "cumulative_sum", "dot_self", "dot_product", "norm", "norm1", "norm2",
    "squared_distance", "distance", "columns_dot_self", "columns_dot_product",
    "rows_dot_self", "rows_dot_product", "crossprod", "tcrossprod", "qr_Q", "qr_R",
    "qr_thin_Q", "qr_thin_R", "svd_U", "svd_V", "singular_values", "inverse",
    "softmax", "log_softmax", "reverse", "head", "tail", "segment", "num_elements",
    "size", "rows", "cov_exp_quad", "gp_exp_quad_cov", "add_diag", "diag_pre_multiply",
})

_ASSIGN = re.compile(r"\s*(\.\*=|\./=|\+=|-=|\*=|/=|=(?!=))")
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BLOCKS = ("functions", "data", "transformed data", "parameters", "transformed parameters",
           "model", "generated quantities")

#: Suffixes of the data variables :func:`override_program` adds.
PUBLIC_SUFFIX = "__public"
DIMS_SUFFIX = "__public_dims"


# --------------------------------------------------------------- scanning --

def _match(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]`` (strings skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == '"':
            j = text.index('"', j + 1)
        elif c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if c != stack.pop():
                raise ValueError("unbalanced brackets in the Stan program")
            if not stack:
                return j
        j += 1
    raise ValueError("unbalanced brackets in the Stan program")


def _end_of_statement(text: str, i: int, stop: int) -> int:
    """Index of the ``;`` ending the simple statement that starts at ``i``."""
    j = i
    while j < stop:
        c = text[j]
        if c == '"':
            j = text.index('"', j + 1)
        elif c in "([{":
            j = _match(text, j)
        elif c == ";":
            return j
        j += 1
    raise ValueError("a statement without ';' in the Stan program")


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _identifiers(text: str) -> set[str]:
    """Identifiers in an expression, string literals left out."""
    return set(_IDENT.findall(re.sub(r'"[^"]*"', '""', text)))


#: Functions of a container's shape only: ``cols`` does not see the rows at
#: all, the others see how many there are.
_SHAPE_ONLY = frozenset({"cols"})
_SHAPE_COUNT = frozenset({"rows", "size", "num_elements", "dims"})


def _references(text: str, rows: str) -> set[str]:
    """The variables an expression depends on; a shape query counts as the row count."""
    out = []
    i = 0
    for m in re.finditer(r"\b([A-Za-z][A-Za-z0-9_]*)\s*\(", text):
        if m.start() < i or m.group(1) not in _SHAPE_ONLY | _SHAPE_COUNT:
            continue
        close = _match(text, m.end() - 1)
        out.append(text[i:m.start()])
        out.append(rows if m.group(1) in _SHAPE_COUNT else "")
        i = close + 1
    out.append(text[i:])
    return _identifiers(" ".join(out))


@dataclasses.dataclass(frozen=True)
class Statement:
    """One simple statement of a block.

    Attributes
    ----------
    start, end : int
        Its span in the program text (``end`` just past the ``;``).
    text : str
        The statement without the ``;``.
    headers : tuple of str
        The conditions and loop ranges of the loops and branches around it.
    depth : int
        Nesting depth inside the block (0: the block's own statements).
    """

    start: int
    end: int
    text: str
    headers: tuple[str, ...]
    depth: int


def _statements(text: str, start: int, stop: int, headers: tuple[str, ...] = (),
                depth: int = 0) -> list[Statement]:
    out: list[Statement] = []
    i = _skip_ws(text, start)
    while i < stop:
        if text[i] == "{":
            j = _match(text, i)
            out += _statements(text, i + 1, j, headers, depth + 1)
            i = _skip_ws(text, j + 1)
            continue
        m = re.match(r"(for|while|if)\s*\(", text[i:stop])
        if m:
            chain = headers
            while True:
                p = i + m.end() - 1
                q = _match(text, p)
                chain = chain + (text[p + 1:q],)
                i = _skip_ws(text, q + 1)
                i = _body(text, i, stop, chain, depth, out)
                e = re.match(r"else\b\s*", text[i:stop])
                if not e:
                    break
                i += e.end()
                m = re.match(r"if\s*\(", text[i:stop])
                if not m:
                    i = _body(text, i, stop, chain, depth, out)
                    break
            continue
        j = _end_of_statement(text, i, stop)
        out.append(Statement(i, j + 1, text[i:j].strip(), headers, depth))
        i = _skip_ws(text, j + 1)
    return out


def _body(text: str, i: int, stop: int, headers: tuple[str, ...], depth: int,
          out: list[Statement]) -> int:
    if text[i] == "{":
        j = _match(text, i)
        out += _statements(text, i + 1, j, headers, depth + 1)
        return _skip_ws(text, j + 1)
    j = _end_of_statement(text, i, stop)
    out += _statements(text, i, j + 1, headers, depth + 1)
    return _skip_ws(text, j + 1)


def program_blocks(text: str) -> dict[str, tuple[int, int]]:
    """The span ``(open brace + 1, close brace)`` of every program block."""
    blocks: dict[str, tuple[int, int]] = {}
    i = _skip_ws(text, 0)
    while i < len(text):
        for name in sorted(_BLOCKS, key=len, reverse=True):
            m = re.match(r"\s+".join(name.split()) + r"\s*\{", text[i:])
            if m:
                open_ = i + m.end() - 1
                close = _match(text, open_)
                blocks[name] = (open_ + 1, close)
                i = _skip_ws(text, close + 1)
                break
        else:
            raise ValueError(f"unexpected text in the Stan program at offset {i}")
    return blocks


# ----------------------------------------------------------- declarations --

@dataclasses.dataclass(frozen=True)
class Declaration:
    """A parsed variable declaration."""

    name: str
    base: str  # base type keyword
    constraint: str  # text inside <...>, or ""
    array_dims: tuple[str, ...]
    base_dims: tuple[str, ...]
    init_span: tuple[int, int] | None  # span of the initialiser expression in the program

    @property
    def rank(self) -> int:
        """Number of dimensions of the value."""
        return len(self.array_dims) + BASE_RANK[self.base]

    @property
    def leading_size(self) -> str | None:
        """The first size expression, or None for a scalar."""
        dims = self.array_dims + self.base_dims
        return dims[0].strip() if dims else None


def _split_top(text: str) -> list[str]:
    """Split a bracket's content at top-level commas."""
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_declaration(program: str, stmt: Statement) -> Declaration | None:
    """The declaration in ``stmt``, or None if it is not one (or a tuple)."""
    text, off = program[stmt.start:stmt.end - 1], stmt.start
    i = _skip_ws(text, 0)
    array_dims: tuple[str, ...] = ()
    m = re.match(r"array\s*\[", text[i:])
    if m:
        p = i + m.end() - 1
        q = _match(text, p)
        array_dims = tuple(_split_top(text[p + 1:q]))
        i = _skip_ws(text, q + 1)
    m = _IDENT.match(text, i)
    if not m or m.group() not in BASE_RANK:
        return None
    base = m.group()
    i = _skip_ws(text, m.end())
    constraint = ""
    if i < len(text) and text[i] == "<":
        depth, j = 0, i
        while j < len(text):
            c = text[j]
            if c in "([{":
                j = _match(text, j)
            elif c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        constraint = text[i + 1:j]
        i = _skip_ws(text, j + 1)
    base_dims: tuple[str, ...] = ()
    if i < len(text) and text[i] == "[":
        q = _match(text, i)
        base_dims = tuple(_split_top(text[i + 1:q]))
        i = _skip_ws(text, q + 1)
    m = _IDENT.match(text, i)
    if not m:
        return None
    name = m.group()
    i = _skip_ws(text, m.end())
    init_span = None
    if i < len(text) and text[i] == "=":
        k = _skip_ws(text, i + 1)
        init_span = (off + k, off + len(text.rstrip()))
    elif i < len(text):
        return None
    return Declaration(name, base, constraint, array_dims, base_dims, init_span)


def _assignment_target(stmt: Statement) -> tuple[str, str] | None:
    """``(variable, right-hand side)`` of an assignment statement, else None."""
    m = _IDENT.match(stmt.text)
    if not m:
        return None
    i = m.end()
    text = stmt.text
    i = _skip_ws(text, i)
    while i < len(text) and text[i] == "[":
        i = _skip_ws(text, _match(text, i) + 1)
    a = _ASSIGN.match(text, i)
    if not a:
        return None
    return m.group(), text[:i] + " " + text[a.end():]


# --------------------------------------------------------------- stanc call --

def canonical_program(stan_file: str | Path, stanc: str | Path,
                      stanc_args: Sequence[str] = ()) -> str:
    """The program as stanc prints it canonically, without comments.

    Raises
    ------
    ValueError
        If stanc rejects the program.
    """
    path = Path(stan_file)
    includes = [a for a in stanc_args if str(a).startswith("--include-paths")]
    proc = subprocess.run(
        [str(stanc), "--auto-format", "--max-line-length=1000",
         "--canonicalize=deprecations,includes,parentheses,braces,strip-comments",
         f"--include-paths={path.parent}", *includes, str(path)],
        capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        raise ValueError(f"stanc could not read {path.name}: {proc.stderr.strip()}")
    return proc.stdout


# --------------------------------------------------------------- analysis --

@dataclasses.dataclass(frozen=True)
class TransformedDataReport:
    """Which ``transformed data`` variables break the per-row split.

    Attributes
    ----------
    all_rows : dict of str to tuple of str
        Variable -> the row variables it is computed from, for every
        ``transformed data`` variable whose value combines rows (an
        aggregate such as a mean, or a per-row value computed with one).
    row_count : tuple of str
        Variables that depend on the row count but not on row values (e.g.
        ``log(N)``): also different in the one-row and zero-row models.
    rows_lower_bound : int or None
        The lower bound declared on the row-count variable, if any.
    transformed_data : tuple of str
        Every variable declared at the top of ``transformed data``.
    per_row : tuple of str
        The ``all_rows`` variables with one entry per row (declared with the row count as their
        leading size): no public value can stand for them, their statements must change.
    calls : dict of str to tuple of str
        ``all_rows`` variable -> the functions over rows (:data:`REDUCERS`) its statements call
        (``("qr_thin_Q",)``), for the message's advice.
    """

    all_rows: dict[str, tuple[str, ...]]
    row_count: tuple[str, ...]
    rows_lower_bound: int | None
    transformed_data: tuple[str, ...]
    per_row: tuple[str, ...] = ()
    calls: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def found(self) -> bool:
        """Whether any variable depends on all rows or on the row count."""
        return bool(self.all_rows or self.row_count)


def _lower_bound(constraint: str) -> int | None:
    m = re.search(r"\blower\s*=\s*(-?\d+)\s*(?:,|$)", constraint)
    return int(m.group(1)) if m else None


def _called_functions(text: str) -> set[str]:
    """The names the statement ``text`` calls as functions (``{"mean", "sd"}``)."""
    return set(re.findall(r"([A-Za-z][A-Za-z0-9_]*)\s*\(", text))


def analyse_transformed_data(program: str, rows: str,
                             row_vars: Iterable[str]) -> TransformedDataReport:
    """Find the ``transformed data`` variables that combine rows.

    Parameters
    ----------
    program : str
        A canonical program (:func:`canonical_program`).
    rows : str
        The row-count variable.
    row_vars : iterable of str
        The data variables sliced per row.

    Returns
    -------
    TransformedDataReport
    """
    blocks = program_blocks(program)
    rows_lower = None
    if "data" in blocks:
        for stmt in _statements(program, *blocks["data"]):
            decl = parse_declaration(program, stmt)
            if decl is not None and decl.name == rows:
                rows_lower = _lower_bound(decl.constraint)
    if "transformed data" not in blocks:
        return TransformedDataReport({}, (), rows_lower, ())
    stmts = _statements(program, *blocks["transformed data"])
    decls: dict[str, Declaration] = {}
    top: list[str] = []
    writes: list[tuple[str, set[str], Statement]] = []
    for stmt in stmts:
        decl = parse_declaration(program, stmt)
        if decl is not None:
            decls.setdefault(decl.name, decl)
            if stmt.depth == 0:
                top.append(decl.name)
            if decl.init_span is not None:
                rhs = program[decl.init_span[0]:decl.init_span[1]]
                writes.append((decl.name, _references(rhs, rows), stmt))
            continue
        target = _assignment_target(stmt)
        if target is not None:
            writes.append((target[0], _references(target[1], rows), stmt))
    row_data = {v: {v} for v in row_vars}  # variable -> the row variables behind it
    count = {rows}
    for _ in range(len(writes) + 1):  # propagate through the writes to a fixed point
        changed = False
        for name, refs, stmt in writes:
            deps = set(refs)
            for header in stmt.headers:
                deps |= _references(header, rows)
            sources = set().union(*(row_data[d] for d in deps if d in row_data))
            if sources - row_data.get(name, set()):
                row_data[name] = row_data.get(name, set()) | sources
                changed = True
            if name not in count and deps & count:
                count.add(name)
                changed = True
        if not changed:
            break

    def row_shaped(name: str) -> bool:
        d = decls.get(name)
        return d is not None and d.leading_size == rows

    all_rows: dict[str, tuple[str, ...]] = {}
    for name in top:
        if name not in row_data:
            continue
        if not row_shaped(name):
            all_rows[name] = tuple(sorted(row_data[name]))
            continue
        # A per-row variable computed with a reducer over row data, outside a
        # loop over the rows (e.g. `vector[N] z = (x - mean(x)) / sd(x)`).
        for target, refs, stmt in writes:
            if target != name or any(rows in _identifiers(h) for h in stmt.headers):
                continue
            called = _called_functions(stmt.text)
            if called & REDUCERS and any(r in row_data and not (r in decls and r in all_rows)
                                         for r in refs):
                all_rows[name] = tuple(sorted(row_data[name]))
                break
    counted = tuple(n for n in top if n in count and n not in row_data and not row_shaped(n))
    calls = {name: tuple(sorted(set().union(*(_called_functions(stmt.text) & REDUCERS
                                              for target, _, stmt in writes if target == name))))
             for name in all_rows}
    return TransformedDataReport(all_rows, counted, rows_lower, tuple(top),
                                 tuple(n for n in all_rows if row_shaped(n)), calls)


# --------------------------------------------------------------- override --

@dataclasses.dataclass(frozen=True)
class PublicOverride:
    """How one overridden ``transformed data`` variable is read from the data.

    Attributes
    ----------
    name : str
        The ``transformed data`` variable.
    data_name : str
        The data variable holding its public value (``<name>__public``).
    dims_name : str or None
        The data variable holding that value's shape (``<name>__public_dims``),
        None for a scalar.
    rank : int
        Number of dimensions of the value.
    integer : bool
        Whether the value is an ``int``.
    declaration : str
        The original declaration's type, for messages (e.g. ``vector[Kc]``).
    """

    name: str
    data_name: str
    dims_name: str | None
    rank: int
    integer: bool
    declaration: str


def _declarations(program: str, block: str) -> dict[str, tuple[Declaration, Statement]]:
    """A block's declarations by name, in program order (none if the block is absent)."""
    blocks = program_blocks(program)
    found: dict[str, tuple[Declaration, Statement]] = {}
    if block in blocks:
        for stmt in _statements(program, *blocks[block]):
            decl = parse_declaration(program, stmt)
            if decl is not None:
                found[decl.name] = (decl, stmt)
    return found


def _data_declarations(program: str) -> dict[str, tuple[Declaration, Statement]]:
    """The ``data`` block's declarations by name."""
    return _declarations(program, "data")


UNIT_BOUNDS: frozenset[tuple[float, float]] = frozenset({(0.0, 1.0), (-1.0, 1.0)})
"""Bounds whose logit is a parameter's own canonical scale (a probability's log-odds, a
correlation's Fisher z): :func:`logit_transformed_parameters` leaves such parameters out."""


def _bound_expressions(constraint: str) -> dict[str, str]:
    """A declaration's ``<...>`` by key: ``{"lower": "0", "upper": "100"}`` (also ``offset``,
    ``multiplier``), each value the expression's text."""
    found = {}
    for part in _split_top(constraint):
        key, eq, value = part.partition("=")
        if eq:
            found[key.strip()] = value.strip()
    return found


def _unit_bounded(bounds: dict[str, str]) -> bool:
    """Whether both bounds are numeric literals and the pair is in :data:`UNIT_BOUNDS`."""
    try:
        return (float(bounds["lower"]), float(bounds["upper"])) in UNIT_BOUNDS
    except (KeyError, ValueError):
        return False


def logit_transformed_parameters(program: str, unit: bool = False) -> tuple[str, ...]:
    """The parameters declared with both a lower and an upper bound (Stan's logit transform),
    except, unless ``unit``, those bounded by ``(0, 1)`` or ``(-1, 1)`` (:data:`UNIT_BOUNDS`).

    Reads the ``parameters`` block of a canonical program, never data.  Such a parameter is
    sampled as ``u`` with ``x = L + (U - L) logistic(u)``, elementwise, whatever ``L`` and ``U``
    (``real<lower=-10, upper=10> beta``, ``real<lower=0, upper=100> sigma``): the private
    search takes the transform's own curvature out of the rows' curvature along it where that
    term dominates (:func:`stan_dp.adaptation.curvature.centred_coordinates`).  A probability
    or a correlation is left out: its logit is already its natural scale (a Bernoulli row's
    curvature in the log-odds is ``p (1 - p)`` for every row; taken back to ``p`` it is
    ``(1 - p)^2`` or ``p^2``, by the row's outcome, and a clipped sum of that is biased).
    With ``unit`` every parameter on the transform is named (its Jacobian:
    :func:`stan_dp.adaptation.curvature._jacobian_ratio`).
    """
    out = []
    for name, (decl, _) in _declarations(program, "parameters").items():
        bounds = _bound_expressions(decl.constraint)
        if "lower" in bounds and "upper" in bounds and (unit or not _unit_bounded(bounds)):
            out.append(name)
    return tuple(out)


def log_transformed_parameters(program: str) -> tuple[str, ...]:
    """The parameters declared with a lower bound and no upper bound (Stan's log transform).

    Reads the ``parameters`` block of a canonical program (:func:`canonical_program`), never
    data.  A scale or shape parameter so declared (``real<lower=0> sigma``) enters the rows'
    log-likelihood through its logarithm, and its per-row gradients are skewed like
    ``r^2 - 1`` (a chi-square less its mean): the rows that clipping cuts all push one way
    (docs/adaptation.md §3, "A scale or shape parameter raises the bound by default").
    """
    out = []
    for name, (decl, _) in _declarations(program, "parameters").items():
        bounds = _bound_expressions(decl.constraint)
        if "lower" in bounds and "upper" not in bounds:
            out.append(name)
    return tuple(out)


_SAMPLED = re.compile(r"^(?P<x>\w+)\s*(?:\[[^\]]*\])?\s*~\s*(?P<family>\w+)\s*\((?P<args>.*)\)$", re.S)
_TARGET = re.compile(r"^target\s*\+=\s*(?P<family>\w+?)_lu?pdf\s*\(\s*(?P<x>\w+)\s*(?:\[[^\]]*\])?\s*"
                     r"\|(?P<args>.*)\)$", re.S)
LOCATION_ARGUMENT = {"normal": 0, "cauchy": 0, "double_exponential": 0, "logistic": 0, "gumbel": 0,
                     "skew_normal": 0, "student_t": 1}
"""Families whose argument at this position (after the variate) is a location parameter."""


SCALE_ARGUMENT = {**{family: at + 1 for family, at in LOCATION_ARGUMENT.items()}, "lognormal": 1,
                  "normal_id_glm": 3}
"""Families whose argument at this position (after the variate) is a scale parameter: the one after
a location family's location (:data:`LOCATION_ARGUMENT`), ``lognormal(mu, sigma)``'s second and
``normal_id_glm(x, alpha, beta, sigma)``'s fourth."""


def scale_parameters(program: str) -> tuple[str, ...]:
    """The parameters the ``model`` block passes, bare, as a sampling statement's scale argument
    (:data:`SCALE_ARGUMENT`), in program order, each once.

    Reads a canonical program, never data: ``d_km ~ normal(a + b * temp, sigma)`` and
    ``target += normal_lpdf(a_j | mu_a, tau)`` give ``sigma`` and ``tau`` where the ``parameters``
    block declares them.  A scale written as an expression (``sqrt(sigma2)``, ``2 * s``) or a
    transformed parameter is not listed.  What for: a scale declared with both bounds
    (``real<lower=0, upper=100> sigma``, the BUGS idiom) is on Stan's logit transform like a
    bounded coefficient, and the private search's far phase must tell the two apart
    (:func:`stan_dp.adaptation.far.scale_coordinates`).
    """
    params = _declarations(program, "parameters")
    found: dict[str, None] = {}
    for m in _model_sampling_statements(program, SCALE_ARGUMENT):
        args, at = _split_top(m["args"]), SCALE_ARGUMENT[m["family"]]
        name = args[at].strip() if len(args) > at else ""
        if name in params:
            found.setdefault(name, None)
    return tuple(found)


def _sampling_match(text: str) -> re.Match | None:
    """A statement's match as a sampling statement (``y ~ f(...)``, :data:`_SAMPLED`, or ``target
    += f_lpdf(y | ...)``, :data:`_TARGET`), or None."""
    return _SAMPLED.match(text) or _TARGET.match(text)


def _prior_statement(stmt: Statement, m: re.Match, readable: set[str]) -> bool:
    """Whether the sampling statement ``stmt`` (matched as ``m``) is a prior on its variate: its
    arguments and its variate's subscript read ``readable`` names and its loops' variables only.
    ``a[g] ~ normal(0, 1)`` with ``g`` a data array is one term per row, not a prior."""
    loops = {m_.group(1) for header in stmt.headers if (m_ := re.match(r"\s*(\w+)\s+in\b", header))}
    names = _identifiers(stmt.text) - _called_functions(stmt.text) - {"target", m["x"]}
    return names <= readable | loops


def _model_sampling_statements(program: str, families: Iterable[str] | None = None) -> Iterator[re.Match]:
    """The ``model`` block's sampling statements (``y ~ f(...)`` or ``target += f_lpdf(y | ...)``)
    of ``families`` (default: every family), each as its match (``x``, ``family``, ``args``, the
    arguments after the variate), in program order."""
    blocks = program_blocks(program)
    if "model" not in blocks:
        return
    for stmt in _statements(program, *blocks["model"]):
        m = _sampling_match(stmt.text)
        if m and (families is None or m["family"] in families):
            yield m


class HierarchicalStatement(NamedTuple):
    """A centred hierarchical vector's sampling statement (:func:`hierarchical_statements`)."""

    location: str
    """Its location parameter (``mu_a`` in ``a ~ normal(mu_a, sigma_a)``)."""
    scale: str
    """Its scale parameter where the argument after the location is a scalar ``real`` parameter
    with the lower bound 0 and either no upper bound (Stan's ``log`` transform) or a numeric one
    (its ``logit`` transform: the BUGS idiom ``real<lower=0, upper=100> sigma_a``), else ``""``."""
    family: str
    """The sampling statement's family (``"normal"``)."""
    upper: float = math.inf
    """The scale's upper bound (``inf``: none, the ``log`` transform)."""


def hierarchical_locations(program: str) -> dict[str, str]:
    """The centred hierarchical vectors of a canonical program: ``{vector: its location}``.

    Reads the ``parameters`` and ``model`` blocks of a canonical program, never data.  A vector is
    one declared ``vector[J] a`` (or ``array[J] real a``) without a constraint, whose sampling
    statement in the ``model`` block is of a location family (:data:`LOCATION_ARGUMENT`) with
    another parameter as its location, a scalar ``real`` without a constraint:
    ``a ~ normal(mu_a, sigma_a)``, also element by element in a loop (``a[j] ~ ...``), as
    ``student_t(nu, mu_a, s)`` or as ``target += normal_lpdf(a | mu_a, sigma_a)`` (or ``_lupdf``).
    Moving the vector and its location together leaves that statement's value unchanged, so along
    that direction only the rows (and the location's own prior) pull: it is the group's
    intercept, the direction every row depends on (:mod:`stan_dp.adaptation.groups`).
    """
    return {vector: stmt.location for vector, stmt in hierarchical_statements(program).items()}


def hierarchical_statements(program: str, literal: bool = False) -> dict[str, HierarchicalStatement]:
    """:func:`hierarchical_locations`' statements with their scale parameter and family.

    With ``literal``, instead, the statements whose location is a numeric literal and whose
    scale is a parameter so declared, the zero-mean random effects as rstanarm and most users write
    them (``u ~ normal(0, sigma_u)``, the group's intercept in the likelihood): their
    ``location`` is ``""`` (no parameter; moving the elements changes the statement).

    ``{"a": HierarchicalStatement("mu_a", "sigma_a", "normal")}`` for ``real<lower=0> sigma_a;``
    and ``a ~ normal(mu_a, sigma_a)``; with ``real<lower=0, upper=100> sigma_a`` its ``upper`` is
    100 (the unconstrained coordinate is then ``logit(sigma_a / 100)``).  The scale is ``""`` where
    the argument after the location is not a scalar ``real`` parameter with the lower bound 0 and
    no upper bound or a positive numeric one: a literal, an expression, or another transform.
    Reads the program, never data.
    """
    params = _declarations(program, "parameters")

    def vector(name: str) -> bool:
        decl = params.get(name, (None,))[0]
        return decl is not None and not decl.constraint.strip() and decl.rank == 1 and (
            decl.base == "vector" or (decl.base == "real" and len(decl.array_dims) == 1))

    def scalar(name: str) -> bool:
        decl = params.get(name, (None,))[0]
        return decl is not None and not decl.constraint.strip() and decl.rank == 0 and decl.base == "real"

    def scale_upper(name: str) -> float | None:
        """The upper bound of a scalar scale with lower bound 0 (inf: none), or None."""
        decl = params.get(name, (None,))[0]
        if decl is None or decl.rank != 0 or decl.base != "real":
            return None
        bounds = _bound_expressions(decl.constraint)
        if bounds.get("lower", "").strip() not in ("0", "0.0"):
            return None
        if "upper" not in bounds:
            return math.inf
        try:
            upper = float(bounds["upper"])
        except ValueError:   # an expression or a data variable: not read
            return None
        return upper if 0.0 < upper < math.inf else None

    found: dict[str, HierarchicalStatement] = {}
    for m in _model_sampling_statements(program, LOCATION_ARGUMENT):
        args, at = _split_top(m["args"]), LOCATION_ARGUMENT[m["family"]]
        location = args[at] if len(args) > at else ""
        scale = args[at + 1].strip() if len(args) > at + 1 else ""
        if not vector(m["x"]):
            continue
        if literal:
            upper = scale_upper(scale) if scale != m["x"] else None
            if _NUMBER.match(location.strip()) and upper is not None:
                found.setdefault(m["x"], HierarchicalStatement("", scale, m["family"], upper))
        elif scalar(location) and location != m["x"]:
            upper = scale_upper(scale) if scale not in (m["x"], location) else None
            scale = scale if upper is not None else ""
            found.setdefault(m["x"], HierarchicalStatement(location, scale, m["family"],
                                                           math.inf if upper is None else upper))
    return found


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
"""A numeric literal (a location written as a number)."""


_OPENERS, _CLOSERS = "([{", ")]}"
_LOGICAL = re.compile(r"[?:<>!&]|\|\||==")
"""Operators that make an expression more than a sum of terms (a condition, a comparison)."""
_EXPONENT = re.compile(r"(?<![A-Za-z_0-9.])(\d+\.?\d*|\.\d+)[eE]$")


def _delimiter(text: str, i: int, step: int, stops: str) -> int:
    """Index of the first character from ``i`` (moving by ``step``, -1 or +1) that is a bracket
    enclosing ``i`` (an opening one going left, a closing one going right) or, outside brackets,
    one of ``stops``; -1 or ``len(text)`` where there is none."""
    inner, outer = (_CLOSERS, _OPENERS) if step < 0 else (_OPENERS, _CLOSERS)
    depth = 0
    while 0 <= i < len(text):
        c = text[i]
        if c in inner:
            depth += 1
        elif c in outer:
            if depth == 0:
                return i
            depth -= 1
        elif depth == 0 and c in stops:
            return i
        i += step
    return i


def _enclosing_sum(text: str, start: int, end: int) -> list[tuple[str, str]] | None:
    """The top-level additive terms ``(sign, term)`` of the expression around ``text[start:end]``.

    The expression is the span between the nearest enclosing delimiter on each side (an opening
    bracket, ``,``, ``|``, ``=`` or ``~`` on the left; a closing bracket or ``,`` on the right, or
    the statement's end): in ``y ~ normal(mu + a[g] + b * x, s)`` the span of ``a[g]`` is
    ``mu + a[g] + b * x``, whose terms are ``("+", "mu")``, ``("+", "a[g]")`` and ``("+", "b *
    x")``.  None where the span is a comparison, a condition or a logical expression, or the left
    delimiter is part of ``==``, ``<=``, ``>=``, ``!=`` or ``||``.
    """
    left = _delimiter(text, start - 1, -1, ",|=~")
    if left >= 1 and text[left] in "=|" and text[left - 1] in "=<>!|":
        return None
    right = _delimiter(text, end, 1, ",")
    expr = text[left + 1:right]
    terms: list[tuple[str, str]] = []
    sign, current, depth = "+", "", 0
    for c in expr:
        if c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            depth -= 1
        binary = current.strip() and current.rstrip()[-1] not in "+-*/^%.\\" and not _EXPONENT.search(current)
        if depth == 0 and c in "+-" and (binary or not current.strip()):
            if current.strip():
                terms.append((sign, current.strip()))
                sign = c
            else:   # a unary sign
                sign = "-" if (sign == "-") != (c == "-") else "+"
            current = ""
            continue
        if depth == 0 and _LOGICAL.match(c):
            return None
        current += c
    if current.strip():
        terms.append((sign, current.strip()))
    return terms


def _model_reading(program: str) -> tuple[set[str], list[Statement]]:
    """What :func:`flat_directions` reads of a program with a ``model`` block: the names a prior
    may read (parameters and scalar data) and the statements of ``transformed parameters`` (where
    there is one) and ``model``, in program order."""
    blocks = program_blocks(program)
    params = _declarations(program, "parameters")
    declared = {**_declarations(program, "data"), **_declarations(program, "transformed data")}
    readable = set(params) | {name for name, (decl, _) in declared.items()
                              if decl.rank == 0 and not decl.array_dims}
    statements = [stmt for block in ("transformed parameters", "model") if block in blocks
                  for stmt in _statements(program, *blocks[block])]
    return readable, statements


def _bare_subscript(term: str, name: str) -> bool:
    """Whether ``term`` is ``name[...]`` and nothing more (the subscript's bracket closes at its end)."""
    m = re.match(rf"{name}\s*\[", term)
    return bool(m) and _match(term, m.end() - 1) == len(term) - 1


def _null_space(equations: list[list[int]], size: int) -> list[list[Fraction]]:
    """A basis of the rational null space of the integer ``equations`` (rows of length ``size``):
    reduced row echelon form by exact elimination, one basis vector per free column (1 there,
    minus the pivots' entries of that column at the pivot columns), in column order."""
    rows = [[Fraction(c) for c in row] for row in equations]
    pivots: list[int] = []
    r = 0
    for col in range(size):
        hit = next((i for i in range(r, len(rows)) if rows[i][col] != 0), None)
        if hit is None:
            continue
        rows[r], rows[hit] = rows[hit], rows[r]
        rows[r] = [c / rows[r][col] for c in rows[r]]
        for i in range(len(rows)):
            if i != r and rows[i][col] != 0:
                factor = rows[i][col]
                rows[i] = [a - factor * b for a, b in zip(rows[i], rows[r])]
        pivots.append(col)
        r += 1
    basis = []
    for free in (col for col in range(size) if col not in pivots):
        v = [Fraction(0)] * size
        v[free] = Fraction(1)
        for i, col in enumerate(pivots):
            v[col] = -rows[i][free]
        basis.append(v)
    return basis


def _sum_uses(name: str, subscripted: bool, statements: list[Statement], readable: set[str],
              rows: set[str]) -> dict[tuple[int, int], list[tuple[str, str]]] | None:
    """Every sum ``name`` is a whole top-level term of in ``statements`` (:func:`flat_directions`),
    keyed by ``(statement, the sum's left delimiter)``: ``{key: its terms}``.  Its own sampling
    statements are skipped where they are priors (:func:`_prior_statement`) under no header that
    reads ``rows``; None where one is not, where ``name`` is in a header, or where an occurrence is
    not such a term (bare; with ``subscripted``, a bare subscript ``name[...]``)."""
    uses: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for k, stmt in enumerate(statements):
        if any(re.search(rf"\b{name}\b", header) for header in stmt.headers):
            return None
        m = _sampling_match(stmt.text)
        if m and m["x"] == name:
            if not _prior_statement(stmt, m, readable) or any(_identifiers(h) & rows for h in stmt.headers):
                return None
            continue
        for occ in re.finditer(rf"\b{name}\b", stmt.text):
            end = occ.end()
            if subscripted:
                after = _skip_ws(stmt.text, end)
                if not (after < len(stmt.text) and stmt.text[after] == "["):
                    return None
                end = _match(stmt.text, after) + 1
            terms = _enclosing_sum(stmt.text, occ.start(), end)
            if terms is None or not any(t == stmt.text[occ.start():end] for _, t in terms):
                return None
            uses[(k, _delimiter(stmt.text, occ.start() - 1, -1, ",|=~"))] = terms
    return uses


def flat_directions(program: str, rows: Iterable[str] = ()) -> list[dict[str, int]]:
    """The directions along which every row's log likelihood is exactly constant, as the program
    writes it: each ``{parameter: integer coefficient}``, moving every unconstrained coordinate of
    each named parameter by its coefficient times ``t``.

    Reads a canonical program, never data.  The candidates are the scalar ``real`` parameters
    without a constraint and the vectors of group effects (:func:`indexed_vectors`: unconstrained,
    indexed by an integer data array), each coordinate its own unconstrained value.  A candidate is
    kept where

    * its own sampling statements in ``model`` are priors (:func:`_prior_statement`:
      ``a ~ normal(0, sigma_a)``, element by element in a loop, or none; not ``a[g] ~ ...`` with
      ``g`` data, one term per row), which read none of ``rows`` (the row count and the row
      variables, where known) and sit in no loop or branch whose header does: ``for (n in 1:N)
      mu ~ normal(0, 1)`` is one term per row too;
    * every other occurrence of it in ``transformed parameters`` and ``model`` is a whole
      top-level term of a sum (:func:`_enclosing_sum`), bare for a scalar (``mu``) and a bare
      subscript for a vector (``a[g]``), with ``+`` or ``-``;
    * it is in no loop's or branch's header, and it has at least one such use.

    Each sum it occurs in is unchanged by a move ``t c`` (``c`` the coefficients) exactly where
    its candidate terms' signed coefficients add up to zero (a vector's subscript moves by its
    coefficient whichever element it picks); every expression built from unchanged sums is
    unchanged, and so is every row.  The directions are a basis of the null space of those
    equations (:func:`_null_space`; the scalars first, then the vectors, so that each direction has
    ``1`` on one vector), scaled to coprime integers with the first nonzero one positive:

    * ``mu + a[county]`` gives ``{"mu": 1, "a": -1}`` (an intercept ridge: rstanarm's zero-mean
      group, or fixed effects beside an intercept);
    * ``ability[p1] - ability[p2]`` gives ``{"ability": 1}`` (Bradley-Terry: a common shift);
    * ``eta = a[site] + c[year]`` in ``transformed parameters`` gives ``{"a": 1, "c": -1}``
      (crossed factors without an intercept);
    * ``mu + a[g] + b[h]`` gives two: ``{"mu": 1, "a": -1}`` and ``{"mu": 1, "b": -1}``.

    Along each, only the prior pulls: the mode there is the prior's
    (:func:`stan_dp.adaptation.groups.ridges_at_prior_mode`) and so is the curvature
    (:func:`~stan_dp.adaptation.groups.ridge_curvature_from_prior`).  A use written otherwise
    (``2 * a[i]``, ``a[i] * x``, ``sum(a)``, a condition, a compound assignment's right side) drops
    that candidate from every direction: a missed direction is the safe side, a wrong one is not.
    """
    blocks = program_blocks(program)
    if "model" not in blocks:
        return []
    params = _declarations(program, "parameters")
    scalars = [name for name, (decl, _) in params.items()
               if not decl.constraint.strip() and decl.rank == 0 and decl.base == "real"]
    candidates = scalars + [name for name in indexed_vectors(program) if name not in scalars]
    if not candidates:
        return []
    readable, statements = _model_reading(program)
    rows = set(rows)
    readable -= rows
    sums: dict[tuple[int, int], list[tuple[str, str]]] = {}
    kept = []
    for name in candidates:
        uses = _sum_uses(name, name not in scalars, statements, readable, rows)
        if uses:
            kept.append(name)
            sums.update(uses)
    if not kept:
        return []

    def coefficient(name: str, term: str) -> bool:
        return term == name if name in scalars else _bare_subscript(term, name)

    equations = [[sum((1 if sign == "+" else -1) for sign, term in terms if coefficient(name, term))
                  for name in kept] for terms in sums.values()]
    out = []
    for v in _null_space(equations, len(kept)):
        scale = math.lcm(*(c.denominator for c in v))
        ints = [int(c * scale) for c in v]
        g = math.gcd(*ints)
        first = next(c for c in ints if c != 0)
        ints = [c // g * (1 if first > 0 else -1) for c in ints]
        out.append({name: c for name, c in zip(kept, ints) if c != 0})
    return out


ORDERED_TYPES = ("ordered", "positive_ordered")
"""Constrained vector types whose unconstrained coordinates are logarithms: an ``ordered`` vector's
increments (``x_k = x_{k-1} + exp(u_k)`` for ``k > 1``; its first element is free) and every
element of a ``positive_ordered`` one (``x_1 = exp(u_1)`` too)."""


def ordered_parameters(program: str) -> dict[str, str]:
    """The parameters declared ``ordered`` or ``positive_ordered`` (scalars of those types or arrays
    of them), by name, with their type (:data:`ORDERED_TYPES`).

    Reads the ``parameters`` block of a canonical program, never data.  Their log-transformed
    coordinates move the log density as a scale parameter's do (a cut point's gap, a mixture's
    separation), so the private search caps their steps like those of
    :func:`log_transformed_parameters` (:attr:`stan_dp.model.ZeroRowPart.log_coordinates`).
    """
    return {name: decl.base for name, (decl, _) in _declarations(program, "parameters").items()
            if decl.base in ORDERED_TYPES}


def simplex_parameters(program: str) -> tuple[str, ...]:
    """The parameters declared ``simplex`` (scalars of that type or arrays of them), in program
    order.  Reads the ``parameters`` block of a canonical program, never data.

    Stan's transform of a simplex is curved, and in a multinomial logit (rows concave in the log
    shares) each row's curvature in the unconstrained coordinates was large, of either sign, and
    summed to little over the rows; the likely cause (not separated) is the row's residual times
    the transform's curvature (:attr:`stan_dp.adaptation.plan.AdaptationSettings.raise_curvature`).
    """
    return tuple(name for name, (decl, _) in _declarations(program, "parameters").items()
                 if decl.base == "simplex")


def sampled_variates(program: str) -> tuple[tuple[str, str], ...]:
    """Every sampling statement of the ``model`` block as ``(variate, family)``, in program order.

    Reads a canonical program, never data: ``y ~ student_t(nu, mu, sigma)`` (also ``y[n] ~ ...``
    in a loop) and ``target += student_t_lpdf(y | ...)`` (or ``_lupdf``) give
    ``("y", "student_t")``.  A statement of another shape (a ``log_mix``, a ``log_sum_exp``, a
    function of the variate on the left) is not listed.
    """
    return tuple((m["x"], m["family"]) for m in _model_sampling_statements(program))


INDEXED_BLOCKS = ("transformed parameters", "model")
"""The blocks :func:`indexed_vectors` reads: where a row's log density is built."""


def row_free_transformed_parameters(program: str, rows: str, row_vars: Iterable[str]) -> tuple[str, ...]:
    """The ``transformed parameters`` computed from parameters and shared data alone, in program
    order: none of their writes reads a row variable, the row count (``rows``, or a shape query of
    a container), a ``transformed data`` variable that does, or another transformed parameter
    that does, in its right-hand side, its declared sizes or the loops and branches around it.

    Reads a canonical program, never data.  The zero-row instance computes these exactly (it holds
    the shared data), so they may be returned with the draws; the others would read the rows, or
    the zero-row stand-ins for them, and are left out (:class:`stan_dp.model.ZeroRowPart`).  Every
    write is a declaration's initialiser or an assignment (Stan's functions cannot change their
    arguments), so a variable no tainted write reaches is computed from untainted values only.
    """
    return _row_free(program, rows, row_vars, "transformed parameters")


def row_free_generated_quantities(program: str, rows: str, row_vars: Iterable[str]) -> tuple[str, ...]:
    """The ``generated quantities`` computed from parameters, shared data and Stan's random number
    generator alone, in program order: the reading of :func:`row_free_transformed_parameters`
    carried through ``transformed data``, ``transformed parameters`` and ``generated quantities``
    (``real theta_new = normal_rng(mu, tau)`` is one; ``vector[N] log_lik``, anything reading a
    row or the row count, or a transformed parameter that does, is not).

    Reads a canonical program, never data.  A random draw is independent of the data, so the
    zero-row instance's values are post-processing of the parameters' draws."""
    return _row_free(program, rows, row_vars, "generated quantities")


_ROW_FREE_READS = {"transformed parameters": ("transformed data", "transformed parameters"),
                   "generated quantities": ("transformed data", "transformed parameters", "generated quantities")}


def _row_free(program: str, rows: str, row_vars: Iterable[str], block_read: str) -> tuple[str, ...]:
    """The top-level declarations of ``block_read`` that no write reading a row reaches."""
    blocks = program_blocks(program)
    if block_read not in blocks:
        return ()
    tainted = set(row_vars) | {rows}
    top: list[str] = []
    writes: list[tuple[str, set[str]]] = []
    stmts = [(block, stmt) for block in _ROW_FREE_READS[block_read] if block in blocks
             for stmt in _statements(program, *blocks[block])]
    for block, stmt in stmts:
        headers: set[str] = set().union(*(_references(h, rows) for h in stmt.headers))
        decl = parse_declaration(program, stmt)
        if decl is not None:
            if stmt.depth == 0 and block == block_read:
                top.append(decl.name)
            sizes = set().union(*(_references(x, rows) for x in (*decl.array_dims, *decl.base_dims,
                                                                   decl.constraint)))
            init = "" if decl.init_span is None else program[decl.init_span[0]:decl.init_span[1]]
            rhs = _references(init, rows)
            writes.append((decl.name, rhs | sizes | headers))
            continue
        target = _assignment_target(stmt)
        if target is not None:
            writes.append((target[0], _references(target[1], rows) | headers))
    for _ in range(len(writes) + 1):   # propagate to a fixed point
        grown = {name for name, deps in writes if name not in tainted and deps & tainted}
        if not grown:
            break
        tainted |= grown
    return tuple(name for name in top if name not in tainted)


_OFFSET_INDEX = re.compile(r"^[A-Za-z_]\w*\s*[+-]\s*\d+$|^\d+\s*[+-]\s*[A-Za-z_]\w*$")


def positional_row_indexing(program: str, row_vars: Sequence[str]) -> list[str]:
    """Where the ``transformed parameters`` or ``model`` block indexes a row variable by position
    across rows: a range (``y[2:N]``, ``y[1:(N - 1)]``) or an offset (``y[n - 1]``, ``y[t + 1]``),
    as written (canonical program text), in program order without repeats.

    Reads a canonical program, never data.  Such a term involves more than one row (a lag, a
    difference, a moving window), so the log density is not a sum of one term per row, which the
    privacy accounting needs (:class:`stan_dp.model.RowModel`); whole-vector use (``y``) and a
    row's own index (``y[n]``, ``y[idx[n]]``) are not listed.
    """
    found: list[str] = []
    for _, parts, snippet in _subscripts(program, row_vars):
        first = parts[0].strip() if parts else ""
        if (":" in first or _OFFSET_INDEX.match(first)) and snippet not in found:
            found.append(snippet)
    return found


def _names_pattern(names: Iterable[str], after: str = r"\b") -> re.Pattern[str] | None:
    """A pattern matching any of ``names`` that is a Stan identifier as a whole word (group 1),
    followed by ``after``; None where there is none."""
    words = sorted({v for v in names if re.fullmatch(r"[A-Za-z_]\w*", v)})
    return re.compile(r"\b(" + "|".join(words) + ")" + after) if words else None


def _subscripts(program: str, names: Iterable[str]) -> Iterator[tuple[str, list[str], str]]:
    """Every subscript of a variable in ``names`` in :data:`INDEXED_BLOCKS`, in program order:
    ``(variable, its top-level index expressions, the text "v[...]")``."""
    pattern = _names_pattern(names, r"\s*\[")
    if pattern is None:
        return
    blocks = program_blocks(program)
    for block in INDEXED_BLOCKS:
        if block not in blocks:
            continue
        start, stop = blocks[block]
        text = program[start:stop]
        for m in pattern.finditer(text):
            close = _match(text, m.end() - 1)
            yield m.group(1), _split_top(text[m.end():close]), text[m.start():close + 1]


COVARIATE_BLOCKS = ("transformed data", "transformed parameters", "model")
"""The blocks :func:`covariate_row_variables` reads: where a row variable can enter a row's log
density (``generated quantities`` cannot)."""


def covariate_row_variables(program: str, row_vars: Sequence[str]) -> tuple[str, ...]:
    """The row variables a program reads as a covariate, in ``row_vars`` order: those read anywhere
    in :data:`COVARIATE_BLOCKS` (a statement, or a loop or branch around one) other than as the
    sole index of another variable's subscript (``theta[person]``, ``b[item[n]]``), and never
    as a variate: the left of ``~`` or a density's first argument (``normal_lpdf(y[n] | ...)``),
    whole or subscripted (an outcome read in a branch, ``if (y[n] > 0)``, is still the outcome).

    Reads a canonical program, never data.  An item-response model, ``y ~ bernoulli_logit(
    theta[person] - b[item])``, reads none: its rows hold an outcome and two indices, so it has no
    slope to centre.  A row variable read in ``transformed data`` (``vector[N] log_x = log(x)``)
    counts, whatever is done with its transform.
    """
    pattern = _names_pattern(row_vars)
    if pattern is None:
        return ()
    blocks = program_blocks(program)
    read: set[str] = set()
    variates: set[str] = set()
    for block in COVARIATE_BLOCKS:
        if block not in blocks:
            continue
        for stmt in _statements(program, *blocks[block]):
            for text in (stmt.text, *stmt.headers):
                for m in pattern.finditer(text):
                    if _variate(text, m.start(), m.end()):
                        variates.add(m.group(1))
                    elif not _sole_index(text, m.start(), m.end()):
                        read.add(m.group(1))
    return tuple(v for v in row_vars if v in read - variates)


_DENSITY_NAME = re.compile(r"\b\w+_(?:lpdf|lupdf|lpmf|lupmf)\s*\(")


def likelihood_weights(program: str, row_vars: Sequence[str]) -> tuple[str, ...]:
    """The row variables a ``model`` block's ``target +=`` statement reads outside every density
    call in it (not as a subscript's sole index), in ``row_vars`` order: a weight on a row's log
    density, ``target += w[n] * normal_lpdf(y[n] | mu, sigma)`` (survey or frequency weights).

    Reads a canonical program, never data.  A row of weight 10 pulls like 10 rows, and privacy
    bounds every row's pull alike, so the heavy-tail warning names the weights
    (:func:`stan_dp.auto._tail_advice`).
    """
    pattern = _names_pattern(row_vars)
    blocks = program_blocks(program)
    if pattern is None or "model" not in blocks:
        return ()
    found: set[str] = set()
    for stmt in _statements(program, *blocks["model"]):
        text = stmt.text
        if not re.match(r"target\s*\+=", text):
            continue
        calls = [(m.start(), _match(text, m.end() - 1)) for m in _DENSITY_NAME.finditer(text)]
        if not calls:
            continue
        for m in pattern.finditer(text):
            inside = any(a <= m.start() < b for a, b in calls)
            if not inside and not _sole_index(text, m.start(), m.end()):
                found.add(m.group(1))
    return tuple(v for v in row_vars if v in found)


_DENSITY_CALL = re.compile(r"\w+_(?:lpdf|lupdf|lpmf|lupmf|lcdf|lccdf|cdf)\s*\($")


def _subscripted_end(text: str, end: int) -> int:
    """Past the subscript that follows a name ending at ``end`` (``end`` itself if none)."""
    k = _skip_ws(text, end)
    return _match(text, k) + 1 if k < len(text) and text[k] == "[" else end


def _variate(text: str, start: int, end: int) -> bool:
    """Whether the name at ``text[start:end]`` (possibly subscripted) is a sampling statement's
    variate (``y[n] ~ ...`` at the statement's start) or a density's first argument."""
    after = text[_subscripted_end(text, end):].lstrip()
    before = text[:start].rstrip()
    return ((not before and after.startswith("~"))
            or (bool(_DENSITY_CALL.search(before)) and (after.startswith("|") or after.startswith(","))))


def _sole_index(text: str, start: int, end: int) -> bool:
    """Whether the name at ``text[start:end]`` (possibly subscripted) is the whole index of a
    variable's subscript: ``[`` right after a name (or a subscript) before it, ``]`` after it."""
    before = text[:start].rstrip()
    after = text[_subscripted_end(text, end):].lstrip()
    if not before.endswith("[") or not after.startswith("]"):
        return False
    owner = before[:-1].rstrip()
    return bool(owner) and (owner[-1] in "]_" or owner[-1].isalnum())


def indexed_vectors(program: str) -> dict[str, tuple[str, ...]]:
    """The vector parameters a program indexes by an integer data array: ``{vector: (indices,)}``.

    Reads a canonical program, never data.  A vector is one declared ``vector[J] mu`` (or
    ``array[J] real mu``) without a constraint; it is listed where :data:`INDEXED_BLOCKS` index it
    with a single index that is an integer data array of one dimension, whole or subscripted:
    ``mu[g]`` in ``y ~ normal(mu[g] + b * x, sigma)``, or ``mu[g[n]]`` in a loop.  Where that array
    holds each row's group (it is sliced by rows: :attr:`stan_dp.model.ZeroRowPart.index_groups`),
    every row depends on exactly one element per index, so moving all elements together moves
    every row as an intercept would (:mod:`stan_dp.adaptation.groups`).
    """
    params = _declarations(program, "parameters")
    data = _declarations(program, "data")
    vectors = {name for name, (decl, _) in params.items()
               if not decl.constraint.strip() and decl.rank == 1
               and (decl.base == "vector" or (decl.base == "real" and len(decl.array_dims) == 1))}
    int_arrays = {name for name, (decl, _) in data.items() if decl.base == "int" and len(decl.array_dims) == 1}
    if not vectors or not int_arrays:
        return {}
    index = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*(\[.*\])?$", re.S)
    found: dict[str, list[str]] = {}
    for vector, parts, _ in _subscripts(program, vectors):
        hit = index.match(parts[0].strip()) if len(parts) == 1 else None
        if hit and hit.group(1) in int_arrays:
            names = found.setdefault(vector, [])
            if hit.group(1) not in names:
                names.append(hit.group(1))
    return {vector: tuple(names) for vector, names in found.items()}


_STD_NORMAL_TARGET = re.compile(r"^target\s*\+=\s*std_normal_lu?pdf\s*\(\s*(?P<x>\w+)\s*(?:\[[^\]]*\])?\s*\)$")


def _literal(text: str, value: float) -> bool:
    try:
        return float(text.strip()) == value
    except ValueError:
        return False


def standard_normal_parameters(program: str) -> tuple[str, ...]:
    """The parameters the ``model`` block samples from a standard normal, in program order:
    ``z ~ std_normal()``, ``z ~ normal(0, 1)``, ``target += std_normal_lpdf(z)`` or
    ``target += normal_lpdf(z | 0, 1)`` (or ``_lupdf``), whole or element by element.

    Reads a canonical program, never data.  A non-centred group's standardised effects are written
    so (``mu + tau * z[g]``): their common level is the intercept's direction already, and their
    prior pins it (:attr:`stan_dp.model.ZeroRowPart.index_groups` leaves them out).
    """
    params = _declarations(program, "parameters")
    blocks = program_blocks(program)
    if "model" not in blocks:
        return ()
    found: list[str] = []
    for stmt in _statements(program, *blocks["model"]):
        text = stmt.text.strip()
        m = _STD_NORMAL_TARGET.match(text)
        name = m["x"] if m else None
        if name is None:
            m = _sampling_match(text)
            args = _split_top(m["args"]) if m and m["args"].strip() else []
            if m and ((m["family"] == "std_normal" and not args)
                      or (m["family"] == "normal" and len(args) == 2 and _literal(args[0], 0.0)
                          and _literal(args[1], 1.0))):
                name = m["x"]
        if name in params and name not in found:
            found.append(name)
    return tuple(found)


_MIXTURE_CALL = re.compile(r"\b(?:log_mix|log_sum_exp)\s*\(")


MIXTURE_BLOCKS = ("functions", "transformed parameters", "model")
"""The blocks :func:`writes_mixture` reads: where a log density is written (a user function the
model calls, a per-row log density kept in transformed parameters, the model block itself)."""


def writes_mixture(program: str) -> bool:
    """Whether a canonical program calls ``log_mix`` or ``log_sum_exp`` in one of
    :data:`MIXTURE_BLOCKS`, the two ways a Stan program writes a finite mixture or sums out a
    discrete latent variable (public: the program's text, never data).  Generated quantities
    (a posterior predictive's ``log_sum_exp``) do not count."""
    blocks = program_blocks(program)
    return any(bool(_MIXTURE_CALL.search(program[start:stop]))
               for name, (start, stop) in blocks.items() if name in MIXTURE_BLOCKS)


def _row_count_relaxation(program: str, data_decls: dict[str, tuple[Declaration, Statement]],
                          rows: str) -> tuple[int, int, str] | None:
    """The edit ``(start, end, text)`` that turns a lower bound of 1 or more on ``rows`` into 0."""
    if rows not in data_decls:
        return None
    decl, stmt = data_decls[rows]
    bound = _lower_bound(decl.constraint)
    if bound is None or bound <= 0:
        return None
    text = program[stmt.start:stmt.end]
    return stmt.start, stmt.end, re.sub(r"\blower\s*=\s*-?\d+", "lower=0", text, count=1)


def relax_row_count(program: str, rows: str) -> str | None:
    """The program with a lower bound of 1 or more on the row count ``rows`` relaxed to 0.

    Published programs often declare ``int<lower=1> N;``.  stan_dp's prior
    part is the model with no rows, which such a bound refuses; relaxing it
    changes nothing else (the data, with ``N >= 1`` rows, satisfy either
    bound, and Stan checks the bound only on the data).  A program whose
    statements need a row (``x[1]``, a mean over the rows) still fails with
    no rows, and says so.

    Parameters
    ----------
    program : str
        A canonical program (:func:`canonical_program`).
    rows : str
        The row-count variable (a ``data`` block ``int``).

    Returns
    -------
    str or None
        The relaxed program, or None when ``rows`` has no positive lower bound.
    """
    edit = _row_count_relaxation(program, _data_declarations(program), rows)
    if edit is None:
        return None
    start, end, text = edit
    return program[:start] + text + program[end:]


def public_data_names(name: str) -> tuple[str, str]:
    """The data variables that carry the public value of ``name`` and its shape."""
    return name + PUBLIC_SUFFIX, name + DIMS_SUFFIX


def override_program(program: str, names: Iterable[str], rows: str
                     ) -> tuple[str, dict[str, PublicOverride]]:
    """Rewrite a program so that some ``transformed data`` values come from the data.

    For each variable ``v``: the data block gains ``v__public`` (of the
    same rank and element type, its sizes given by ``v__public_dims``); in
    ``transformed data`` the declaration of ``v`` keeps its type and
    constraints but takes the value ``v__public`` (Stan checks the sizes and
    constraints), and every later assignment to ``v`` is removed, so nothing
    computes ``v`` from the rows any more.  A lower bound of 1 (or more) on
    the row-count variable becomes 0: the prior part of the split is the
    model with no rows.

    Parameters
    ----------
    program : str
        A canonical program (:func:`canonical_program`).
    names : iterable of str
        ``transformed data`` variables declared at the top of the block.
    rows : str
        The row-count variable.

    Returns
    -------
    (str, dict)
        The new program and, per variable, its :class:`PublicOverride`.

    Raises
    ------
    ValueError
        If a name is not a top-level ``transformed data`` variable (the
        message lists those), is a data variable, or has a type that cannot
        be overridden (tuples, complex values).
    """
    names = list(dict.fromkeys(names))
    blocks = program_blocks(program)
    data_decls = _data_declarations(program)
    td_stmts = (_statements(program, *blocks["transformed data"])
                if "transformed data" in blocks else [])
    td_decls: dict[str, tuple[Declaration, Statement]] = {}
    for stmt in td_stmts:
        decl = parse_declaration(program, stmt)
        if decl is not None and stmt.depth == 0:
            td_decls.setdefault(decl.name, (decl, stmt))
    for name in names:
        if name in data_decls:
            raise ValueError(
                f"public_data: {name!r} is a data variable already; give its value in the data")
        if name not in td_decls:
            known = ", ".join(td_decls) or "none"
            raise ValueError(
                f"public_data: {name!r} is not a variable of the transformed data block "
                f"(declared there: {known})")
        decl = td_decls[name][0]
        if decl.leading_size == rows:
            raise ValueError(
                f"public_data: {name!r} has one entry per row ({rows}); a public value cannot "
                "stand for row data. Compute each row's entry from that row's data and named "
                "constants (in the transformed data block), and give those constants public "
                "values instead")
        if decl.base.startswith("complex"):
            raise ValueError(f"public_data: {name!r} is complex; only real and int values "
                             "can be overridden")

    edits: list[tuple[int, int, str]] = []
    overrides: dict[str, PublicOverride] = {}
    new_data: list[str] = []
    for name in names:
        decl, stmt = td_decls[name]
        data_name, dims_name = public_data_names(name)
        rank = decl.rank
        integer = decl.base == "int"
        dims = [f"{dims_name}[{k + 1}]" for k in range(rank)]
        n_array = len(decl.array_dims)
        base_rank = BASE_RANK[decl.base]
        if integer:
            base = "int"
        elif base_rank == 0:
            base = "real"
        elif base_rank == 1:
            base = "row_vector" if decl.base == "row_vector" else "vector"
        else:
            base = "matrix"
        base_text = base + (f"[{', '.join(dims[n_array:])}]" if base_rank else "")
        array_text = f"array[{', '.join(dims[:n_array])}] " if n_array else ""
        if rank:
            new_data.append(f"  array[{rank}] int<lower=0> {dims_name};")
        new_data.append(f"  {array_text}{base_text} {data_name};")
        if decl.init_span is not None:
            edits.append((decl.init_span[0], decl.init_span[1], data_name))
        else:
            edits.append((stmt.end, stmt.end, f"\n  {name} = {data_name};"))
        for other in td_stmts:
            if other is stmt:
                continue
            target = _assignment_target(other)
            if target is not None and target[0] == name:
                edits.append((other.start, other.end, ";"))
        declared = program[stmt.start:stmt.end - 1]
        if decl.init_span is not None:
            declared = program[stmt.start:decl.init_span[0]].rstrip(" =")
        overrides[name] = PublicOverride(name, data_name, dims_name if rank else None, rank,
                                         integer, declared.strip())
    relaxation = _row_count_relaxation(program, data_decls, rows)
    if relaxation is not None:
        edits.append(relaxation)
    if "data" in blocks:
        close = blocks["data"][1]
        edits.append((close, close, "\n".join(new_data) + "\n"))
    else:  # a data block goes after the functions block, if any, else first
        start = blocks["functions"][1] + 1 if "functions" in blocks else 0
        edits.append((start, start, "\ndata {\n" + "\n".join(new_data) + "\n}\n"))
    out = program
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + text + out[end:]
    return out, overrides
