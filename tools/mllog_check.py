#!/usr/bin/env python3
"""Check an MLLOG file against the MLPerf Training v3.0 logging rules.

    python3 tools/mllog_check.py run.mllog            # exit 0: compliant, 1: violations, 2: unreadable
    python3 tools/mllog_check.py --quiet run.mllog    # violations only
    python3 tools/mllog_check.py --rules r.json run.mllog   # r.json: benchhost info <plugin> --json
    python3 tools/mllog_check.py --benchhost /opt/benchhost/bin/benchhost run.mllog

The benchmark rules are not written here: every workload plugin declares its own (MLLOG keys and
their constraints, the closed-division values and quality target, runs and olympic drops; the SDK's
mlperf_rules.hpp), and this tool reads the declarations from `benchhost list --json` (the build's
build/bin/benchhost next to this script, `benchhost` on PATH, --benchhost, or $BENCHHOST) or from
--rules files. An MLLOG file is checked against the plugin that declares its submission_benchmark.

What it checks (the rules of mlcommons/logging's compliance checker for training 3.0.0, restated
here because that package cannot be installed on a machine without network access):
  * every line holding ':::MLLOG ' carries a JSON object with namespace, time_ms (a number),
    event_type (POINT_IN_TIME, INTERVAL_START or INTERVAL_END), key, value and metadata (an object
    with file and lineno);
  * the common rules: the submission keys, cache_clear, init_start .. init_stop .. run_start ..
    run_stop in that order with run_stop's status, epoch or block markers with their metadata,
    eval_start / eval_stop / eval_accuracy with epoch_num, train_samples and eval_samples exactly
    once, time stamps that never go backwards, and (closed division) init_stop within 30 minutes
    of the first init_start;
  * the benchmark's own keys, as its plugin declares them, and how often each appears. These are
    checked in both divisions: a result that does not say which optimizer and hyperparameters it
    ran is not one a reader can compare, whatever the division;
  * in the closed division also the values the rules fix (an optimizer's constants, the names of
    the initialised tensors, ...) and that an evaluation reached the
    benchmark's quality target; only a benchmark whose plugin declares closed-division rules may
    log the closed division. A scaled-down configuration (benchhost's mini configs) logs the
    open division, where the rules fix no values;
  * eval_accuracy's type: a number, or, for a benchmark whose plugin declares per-field targets
    (Mask R-CNN's {"BBOX": b, "SEGM": s}), a dictionary with every declared field, whose target is
    reached when one evaluation passes every field's check.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

TOKEN = ":::MLLOG "
EVENT_TYPES = ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")
STATUSES = ("cloud", "onprem", "preview", "research")
CLOSED_INIT_LIMIT_MS = 30 * 60 * 1000

ONE, AT_LEAST_ONE = "exactly one", "at least one"


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def same_value(a, b):
    """Numbers compare as numbers (0 == 0.0); anything else exactly, booleans never as numbers."""
    if number(a) and number(b):
        return a == b
    return type(a) == type(b) and a == b  # noqa: E721


def value_check(check):
    """(test, description) for a declared value check (mlperf_rules.hpp ValueCheck), or None when
    the declaration fixes nothing."""
    if not check:
        return None
    parts, tests = [], []
    if "one_of" in check:
        allowed = check["one_of"]
        parts.append("== {!r}".format(allowed[0]) if len(allowed) == 1
                     else "one of {}".format(", ".join(repr(a) for a in allowed)))
        tests.append(lambda v: any(same_value(v, a) for a in allowed))
    if "min" in check:
        lo, exclusive = check["min"], check.get("min_exclusive", False)
        parts.append("{} {}".format(">" if exclusive else ">=", lo))
        tests.append(lambda v: number(v) and (v > lo if exclusive else v >= lo))
    if "max" in check:
        hi, exclusive = check["max"], check.get("max_exclusive", False)
        parts.append("{} {}".format("<" if exclusive else "<=", hi))
        tests.append(lambda v: number(v) and (v < hi if exclusive else v <= hi))
    if not tests:
        return None
    return (lambda v: all(t(v) for t in tests), " and ".join(parts))


def positive():
    return value_check({"min": 0, "min_exclusive": True})


def one_of(*allowed):
    return value_check({"one_of": list(allowed)})


class RulesUnavailable(Exception):
    """The plugins' declarations could not be read."""


def declarations_from(data):
    """benchmark key (the plugin's name when it declares none) -> plugin declaration, from
    `benchhost list --json` or `info <p> --json` output (a list of either is accepted too)."""
    found = {}
    items = data if isinstance(data, list) else [data]
    for item in items:
        plugins = item.get("plugins", [item]) if isinstance(item, dict) else []
        for plugin in plugins:
            # The host logs a plugin without a benchmark key under its own name.
            if isinstance(plugin, dict) and (plugin.get("benchmark") or plugin.get("name")):
                found[plugin.get("benchmark") or plugin["name"]] = plugin
    return found


def default_benchhost():
    env = os.environ.get("BENCHHOST")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "build", "bin", "benchhost")
    if os.access(built, os.X_OK):
        return built
    return shutil.which("benchhost")


def load_declarations(rules_files=(), benchhost=None):
    """benchmark key -> declaration, from --rules files or by asking benchhost for every plugin's."""
    if rules_files:
        found = {}
        for path in rules_files:
            try:
                with open(path, encoding="utf-8") as f:
                    found.update(declarations_from(json.load(f)))
            except (OSError, ValueError) as e:
                raise RulesUnavailable("cannot read rules file {}: {}".format(path, e))
        return found
    benchhost = benchhost or default_benchhost()
    if not benchhost:
        raise RulesUnavailable("no benchhost executable found to ask for the plugins' MLPerf rules; pass --rules FILE "
                               "(benchhost info <plugin> --json > FILE) or --benchhost PATH")
    try:
        out = subprocess.run([benchhost, "list", "--json"], check=True, capture_output=True, text=True, timeout=120)
        return declarations_from(json.loads(out.stdout))
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise RulesUnavailable("`{} list --json` did not give the plugins' declarations: {}".format(benchhost, e))


class Line:
    def __init__(self, number, record):
        self.number = number  # 1-based line number in the file
        self.time_ms = record["time_ms"]
        self.event_type = record["event_type"]
        self.key = record["key"]
        self.value = record["value"]
        self.metadata = record["metadata"]


def parse(path):
    """Returns (lines, errors); errors name the file's line number."""
    lines, errors = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, start=1):
            at = raw.find(TOKEN)
            if at < 0:
                continue
            text = raw[at + len(TOKEN):].strip()
            try:
                record = json.loads(text)
            except ValueError as e:
                errors.append("line {}: not JSON after ':::MLLOG' ({})".format(number, e))
                continue
            problem = record_problem(record)
            if problem:
                errors.append("line {}: {}".format(number, problem))
                continue
            lines.append(Line(number, record))
    return lines, errors


def record_problem(record):
    if not isinstance(record, dict):
        return "the record is not a JSON object"
    for field in ("namespace", "time_ms", "event_type", "key", "value", "metadata"):
        if field not in record:
            return "no '{}' field".format(field)
    if isinstance(record["time_ms"], bool) or not isinstance(record["time_ms"], (int, float)):
        return "time_ms {!r} is not a number".format(record["time_ms"])
    if record["event_type"] not in EVENT_TYPES:
        return "event_type {!r} is not one of {}".format(record["event_type"], ", ".join(EVENT_TYPES))
    if not isinstance(record["key"], str) or not record["key"]:
        return "key {!r} is not a non-empty string".format(record["key"])
    meta = record["metadata"]
    if not isinstance(meta, dict):
        return "metadata is not an object"
    if not isinstance(meta.get("file"), str) or not isinstance(meta.get("lineno"), int):
        return "metadata lacks 'file' (a string) and 'lineno' (an integer)"
    return None


class Checker:
    def __init__(self, lines):
        self.lines = lines
        self.violations = []
        self.by_key = {}
        for line in lines:
            self.by_key.setdefault(line.key, []).append(line)

    def fail(self, message, line=None):
        self.violations.append("line {}: {}".format(line.number, message) if line else message)

    def occurrences(self, key):
        return self.by_key.get(key, [])

    def require(self, key, how_often):
        found = len(self.occurrences(key))
        if (how_often == ONE and found != 1) or (how_often == AT_LEAST_ONE and found < 1):
            self.fail("'{}': {} required, {} found".format(key, how_often, found))

    def value_check(self, key, check, why=""):
        test, description = check
        for line in self.occurrences(key):
            try:
                ok = test(line.value)
            except TypeError:
                ok = False
            if not ok:
                self.fail("'{}' is {!r}; the rules want {}{}".format(key, line.value, description, why), line)

    def first_value(self, key):
        found = self.occurrences(key)
        return found[0].value if found else None

    # ---- common.yaml -------------------------------------------------------------------------
    def common(self, division, declarations):
        for key in ("submission_org", "submission_platform"):
            self.require(key, ONE)
            self.value_check(key, (lambda v: isinstance(v, str) and v != "", "a non-empty string"))
        self.require("submission_division", ONE)
        self.value_check("submission_division", one_of("closed", "open"))
        self.require("submission_status", ONE)
        self.value_check("submission_status", one_of(*STATUSES))
        self.require("submission_benchmark", ONE)
        self.value_check("submission_benchmark", (lambda v: v in declarations, "a benchmark some plugin declares ({})".format(
            ", ".join(sorted(declarations)) or "none found")))
        self.require("cache_clear", AT_LEAST_ONE)
        for key, how_often in (("init_start", AT_LEAST_ONE), ("init_stop", ONE), ("run_start", ONE),
                               ("run_stop", ONE), ("eval_accuracy", AT_LEAST_ONE), ("train_samples", ONE),
                               ("eval_samples", ONE)):
            self.require(key, how_often)
        for key in ("train_samples", "eval_samples"):
            self.value_check(key, (lambda v: v != "", "a value"))
        if division == "closed":
            self.require("gradient_accumulation_steps", ONE)
            self.value_check("gradient_accumulation_steps", positive())

        # Order: init_start .. init_stop .. run_start .. (epochs, evaluations) .. run_stop.
        init_started = init_stopped = run_started = run_stopped = False
        first_init_ms = None
        last_ms = None
        for line in self.lines:
            if last_ms is not None and line.time_ms < last_ms:
                self.fail("time_ms {} goes back from {}".format(line.time_ms, last_ms), line)
            last_ms = line.time_ms
            k, meta = line.key, line.metadata
            if k == "init_start":
                if init_stopped or run_started:
                    self.fail("init_start after init_stop or run_start", line)
                init_started = True
                first_init_ms = line.time_ms if first_init_ms is None else min(first_init_ms, line.time_ms)
            elif k == "init_stop":
                if not init_started or run_started:
                    self.fail("init_stop needs an init_start before it and no run_start", line)
                if (division == "closed" and first_init_ms is not None and
                        line.time_ms - first_init_ms >= CLOSED_INIT_LIMIT_MS):
                    self.fail("initialisation took {:.1f} min; the closed division allows 30".format(
                        (line.time_ms - first_init_ms) / 60000.0), line)
                init_stopped = True
            elif k == "run_start":
                if not init_stopped:
                    self.fail("run_start before init_stop", line)
                run_started = True
            elif k == "run_stop":
                if not run_started:
                    self.fail("run_stop before run_start", line)
                if "status" not in meta:
                    self.fail("run_stop without a 'status' in its metadata", line)
                elif meta["status"] not in ("success", "aborted"):
                    self.fail("run_stop status {!r} is not success or aborted".format(meta["status"]), line)
                run_stopped = True
            elif k == "block_start":
                if not run_started:
                    self.fail("block_start before run_start", line)
                count = meta.get("epoch_count")
                if "first_epoch_num" not in meta or not isinstance(count, (int, float)) or count <= 0:
                    self.fail("block_start needs 'first_epoch_num' and a positive 'epoch_count' in its metadata", line)
            elif k == "block_stop":
                if "first_epoch_num" not in meta:
                    self.fail("block_stop needs 'first_epoch_num' in its metadata", line)
            elif k in ("epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy"):
                if "epoch_num" not in meta:
                    self.fail("{} needs 'epoch_num' in its metadata".format(k), line)
                if k in ("epoch_start", "eval_start") and not run_started:
                    self.fail("{} before run_start".format(k), line)
                if run_stopped:
                    self.fail("{} after run_stop".format(k), line)
        for pair in (("block_start", "epoch_start"), ("block_stop", "epoch_stop"),
                     ("eval_start", "block_start"), ("eval_stop", "block_stop")):
            if not any(self.occurrences(k) for k in pair):
                self.fail("at least one '{}' or '{}' required, none found".format(*pair))

    # ---- the benchmark's own keys, as its plugin declares them ----------------------------------
    def benchmark(self, name, division, declaration):
        if declaration is None:
            return  # common() said that no plugin declares it
        rules = declaration.get("mlperf", {})
        closed = division == "closed"
        if closed and not rules.get("closed_division", False):
            self.fail("benchmark '{}' has no closed-division rules (plugin '{}' does not declare its closed "
                      "reference); log submission_division open".format(name, declaration.get("name")))
        for entry in rules.get("keys", []):
            key = entry["key"]
            when = entry.get("when")
            if when and not same_value(self.first_value(when["key"]), when["value"]):
                continue
            self.require(key, ONE if entry.get("occurrence", "exactly_one") == "exactly_one" else AT_LEAST_ONE)
            check = value_check(entry.get("check"))
            if check:
                self.value_check(key, check)
            closed_check = value_check(entry.get("closed_check"))
            if closed and closed_check:
                self.value_check(key, closed_check, " in the closed division")
            field = entry.get("metadata_field")
            if field:
                values = []
                for line in self.occurrences(key):
                    if field not in line.metadata:
                        self.fail("{} without a '{}' in its metadata".format(key, field), line)
                    else:
                        values.append(line.metadata[field])
                expected = entry.get("closed_metadata_values")
                if closed and expected is not None and sorted(values) != sorted(expected):
                    missing, extra = sorted(set(expected) - set(values)), sorted(set(values) - set(expected))
                    self.fail("{} names {} {}s; the closed '{}' reference has {} (missing: {}; not the reference's: {})".format(
                        key, len(values), field, name, len(expected), ", ".join(missing[:5]) or "none",
                        ", ".join(extra[:5]) or "none"))
        eval_samples = value_check(rules.get("closed_eval_samples"))
        if closed and eval_samples:
            self.value_check("eval_samples", eval_samples, " in the closed division")
        if dictionary_fields(rules):
            self.dictionary_target(name, closed, rules)
            return
        for line in self.occurrences("eval_accuracy"):
            if isinstance(line.value, dict):
                self.fail("eval_accuracy is a dictionary {}; benchmark '{}' logs a number (its plugin declares no "
                          "per-field targets)".format(json.dumps(line.value), name), line)
        target = value_check(rules.get("closed_target" if closed else "open_target"))
        if target:
            test, description = target
            values = [line.value for line in self.occurrences("eval_accuracy")]
            numbers = [v for v in values if number(v)]
            if values and not any(test(v) for v in numbers):
                lower_is_better = declaration.get("metric", {}).get("direction") == "min"
                best = (min if lower_is_better else max)(numbers) if numbers else None
                self.fail("no eval_accuracy reaches the {} target ({}); best {}".format(
                    "closed" if closed else "open", description, best))


    def dictionary_target(self, name, closed, rules):
        """A benchmark whose eval_accuracy is a dictionary (mlperf_rules.hpp, Note [Dictionary-valued
        targets]; closed_maskrcnn.yaml): every eval_accuracy is an object with every declared field,
        and in the division's rules some one evaluation passes every field's check at once."""
        fields = dictionary_fields(rules)
        lines = self.occurrences("eval_accuracy")
        dictionaries = []
        for line in lines:
            if not isinstance(line.value, dict):
                self.fail("eval_accuracy is {!r}; benchmark '{}' logs a dictionary with the fields {}".format(
                    line.value, name, ", ".join(fields)), line)
                continue
            missing = [f for f in fields if f not in line.value]
            if missing:
                self.fail("eval_accuracy {} lacks the field{} {}; benchmark '{}' logs {}".format(
                    json.dumps(line.value), "s" if len(missing) > 1 else "", ", ".join(missing), name,
                    ", ".join(fields)), line)
                continue
            dictionaries.append(line)
        checks = []
        for entry in rules.get("closed_target_fields" if closed else "open_target_fields") or []:
            check = value_check(entry.get("check"))
            if check:
                checks.append((entry["field"], check))
        if not checks or not lines:
            return

        def passes(value):
            try:
                return all(test(value[field]) for field, (test, _) in checks)
            except TypeError:
                return False

        if not any(passes(line.value) for line in dictionaries):
            description = " and ".join("{} {}".format(field, text) for field, (_, text) in checks)
            best = json.dumps(dictionaries[-1].value) if dictionaries else None
            self.fail("no eval_accuracy reaches the {} target ({}) in one evaluation; last {}".format(
                "closed" if closed else "open", description, best))


def dictionary_fields(rules):
    """The fields of a dictionary-valued eval_accuracy, in declaration order (closed first), or []
    when the benchmark's eval_accuracy is a number."""
    fields = []
    for key in ("closed_target_fields", "open_target_fields"):
        for entry in rules.get(key) or []:
            if entry.get("field") not in fields:
                fields.append(entry.get("field"))
    return fields


def check(path, declarations):
    """Returns (lines, violations, division, benchmark). declarations: benchmark key -> plugin
    declaration (load_declarations())."""
    lines, errors = parse(path)
    checker = Checker(lines)
    checker.violations += errors
    if not lines:
        checker.fail("no ':::MLLOG' lines in {}".format(path))
        return lines, checker.violations, None, None
    division = checker.first_value("submission_division")
    benchmark = checker.first_value("submission_benchmark")
    checker.common(division, declarations)
    checker.benchmark(benchmark, division, declarations.get(benchmark) if isinstance(benchmark, str) else None)
    return lines, checker.violations, division, benchmark


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mllog", help="an MLLOG file (benchhost --mllog FILE)")
    parser.add_argument("--quiet", action="store_true", help="print the violations only")
    parser.add_argument("--rules", action="append", default=[], metavar="FILE",
                        help="plugin declarations to check against (benchhost info <plugin> --json or "
                             "benchhost list --json output; repeatable) instead of asking benchhost")
    parser.add_argument("--benchhost", metavar="PATH", help="the benchhost executable to ask for every plugin's rules")
    args = parser.parse_args(argv)
    try:
        declarations = load_declarations(args.rules, args.benchhost)
        lines, violations, division, benchmark = check(args.mllog, declarations)
    except RulesUnavailable as e:
        print("mllog_check: {}".format(e), file=sys.stderr)
        return 2
    except OSError as e:
        print("mllog_check: cannot read {}: {}".format(args.mllog, e.strerror or e), file=sys.stderr)
        return 2
    for v in violations:
        print("mllog_check: {}".format(v))
    if not args.quiet:
        print("mllog_check: {}: {} MLLOG lines, benchmark {}, {} division: {}".format(
            args.mllog, len(lines), benchmark, division,
            "compliant" if not violations else "{} violation(s)".format(len(violations))))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
