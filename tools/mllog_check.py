#!/usr/bin/env python3
"""Check an MLLOG file against the MLPerf Training v3.0 logging rules.

    python3 tools/mllog_check.py run.mllog            # exit 0: compliant, 1: violations, 2: unreadable
    python3 tools/mllog_check.py --quiet run.mllog    # violations only

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
  * the benchmark's own keys (resnet, bert, gpt3, dlrm_dcnv2) and how often each appears. These
    are checked in both divisions: a result that does not say which optimizer and hyperparameters
    it ran is not one a reader can compare, whatever the division;
  * in the closed division also the values the rules fix (Adam's betas for gpt3, Adagrad's
    epsilon for dlrm_dcnv2, the ResNet-50 tensor names, ...) and that an evaluation reached the
    benchmark's quality target. A scaled-down configuration (benchhost's mini configs) logs the
    open division, where the rules fix no values.
"""

import argparse
import json
import sys

TOKEN = ":::MLLOG "
EVENT_TYPES = ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")
BENCHMARKS = ("resnet", "ssd", "maskrcnn", "minigo", "dlrm", "dlrm_dcnv2", "bert", "rnnt", "unet3d", "gpt3")
STATUSES = ("cloud", "onprem", "preview", "research")
CLOSED_INIT_LIMIT_MS = 30 * 60 * 1000

ONE, AT_LEAST_ONE = "exactly one", "at least one"


def resnet50_tensor_names():
    """The 161 tensor names closed ResNet-50 must log in weights_initialization events."""
    names = ["conv0_weight", "bn0_gamma", "bn0_beta", "fc1_weight", "fc1_bias"]
    for stage, units in enumerate((3, 4, 6, 3), start=1):
        for unit in range(1, units + 1):
            prefix = "stage{}_unit{}_".format(stage, unit)
            for i in (1, 2, 3):
                names += [prefix + "conv{}_weight".format(i), prefix + "bn{}_gamma".format(i),
                          prefix + "bn{}_beta".format(i)]
            if unit == 1:
                names += [prefix + "conv1sc_weight", prefix + "bnsc_gamma", prefix + "bnsc_beta"]
    return names


def equals(expected):
    return (lambda v: v == expected, "== {!r}".format(expected))


def one_of(*allowed):
    return (lambda v: v in allowed, "one of {}".format(", ".join(repr(a) for a in allowed)))


def positive():
    return (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "> 0")


# Per benchmark: key -> (how often, value check that holds in both divisions or None,
#                        value check that the closed division adds or None).
# Quality targets: (the eval_accuracy test, its description), checked in the closed division.
RULES = {
    "bert": {
        "keys": {
            "global_batch_size": (ONE, None, None),
            "opt_base_learning_rate": (ONE, None, None),
            "opt_lamb_epsilon": (ONE, None, None),
            "opt_learning_rate_training_steps": (ONE, None, None),
            "opt_learning_rate_warmup_steps": (ONE, None, None),
            "num_warmup_steps": (ONE, None, None),
            "start_warmup_step": (ONE, None, None),
            "opt_lamb_beta_1": (ONE, None, None),
            "opt_lamb_beta_2": (ONE, None, None),
            "opt_lamb_weight_decay_rate": (ONE, None, None),
        },
        "target": (lambda v: 0.720 <= v < 1.0, "masked-LM accuracy >= 0.720"),
    },
    "gpt3": {
        "keys": {
            "global_batch_size": (ONE, None, None),
            "max_sequence_length": (ONE, None, equals(2048)),
            "opt_name": (ONE, equals("adam"), None),
            "opt_base_learning_rate": (ONE, None, one_of(2e-5, 3e-5)),
            "opt_end_learning_rate": (ONE, None, None),
            "opt_learning_rate_decay_steps": (ONE, None, None),
            "opt_learning_rate_warmup_steps": (ONE, None, None),
            "opt_learning_rate_decay_schedule": (ONE, equals("cosine with linear warmup"), None),
            "opt_adam_beta_1": (ONE, None, equals(0.9)),
            "opt_adam_beta_2": (ONE, None, equals(0.95)),
            "opt_adam_epsilon": (ONE, None, equals(1e-8)),
            "opt_gradient_clip_norm": (ONE, None, equals(1.0)),
            "trained_samples": (ONE, None, None),
            "init_checkpoint_step": (ONE, None, positive()),
        },
        "target": (lambda v: 2.6 < v <= 2.69, "log perplexity <= 2.69"),
    },
    "dlrm_dcnv2": {
        "keys": {
            "global_batch_size": (ONE, None, None),
            "opt_name": (ONE, equals("adagrad"), None),
            "opt_base_learning_rate": (ONE, None, None),
            "opt_adagrad_learning_rate_decay": (ONE, None, equals(0)),
            "opt_weight_decay": (ONE, None, equals(0)),
            "opt_adagrad_initial_accumulator_value": (ONE, None, equals(0)),
            "opt_adagrad_epsilon": (ONE, None, equals(1e-10)),
            "opt_learning_rate_warmup_steps": (ONE, None, equals(0)),
            "opt_learning_rate_decay_start_step": (ONE, None, equals(0)),
            "opt_learning_rate_decay_steps": (ONE, None, equals(0)),
        },
        "eval_samples": equals(89137319),
        "target": (lambda v: 0.80275 <= v <= 1.0, "AUC >= 0.80275"),
    },
    "resnet": {
        "keys": {
            "global_batch_size": (ONE, positive(), None),
            "opt_name": (ONE, one_of("sgd", "lars"), None),
            "weights_initialization": (AT_LEAST_ONE, None, None),
        },
        "by_optimizer": {
            "lars": ["lars_epsilon", "lars_opt_weight_decay", "lars_opt_base_learning_rate",
                     "lars_opt_end_learning_rate", "lars_opt_learning_rate_decay_poly_power",
                     "lars_opt_learning_rate_decay_steps", "lars_opt_learning_rate_warmup_epochs",
                     "lars_opt_momentum"],
            "sgd": ["sgd_opt_base_learning_rate", "sgd_opt_end_learning_rate",
                    "sgd_opt_learning_rate_decay_poly_power", "sgd_opt_learning_rate_decay_steps",
                    "sgd_opt_weight_decay", "sgd_opt_momentum", "opt_learning_rate_decay_boundary_epochs"],
        },
        "target": (lambda v: 0.759 <= v < 1.0, "top-1 >= 0.759"),
    },
}


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
    def common(self, division):
        for key in ("submission_org", "submission_platform"):
            self.require(key, ONE)
            self.value_check(key, (lambda v: isinstance(v, str) and v != "", "a non-empty string"))
        self.require("submission_division", ONE)
        self.value_check("submission_division", one_of("closed", "open"))
        self.require("submission_status", ONE)
        self.value_check("submission_status", one_of(*STATUSES))
        self.require("submission_benchmark", ONE)
        self.value_check("submission_benchmark", one_of(*BENCHMARKS))
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

    # ---- the benchmark's own keys --------------------------------------------------------------
    def benchmark(self, name, division):
        rules = RULES.get(name)
        if rules is None:
            return
        closed = division == "closed"
        for key, (how_often, check, closed_check) in rules["keys"].items():
            self.require(key, how_often)
            if check:
                self.value_check(key, check)
            if closed and closed_check:
                self.value_check(key, closed_check, " in the closed division")
        optimizer = self.first_value("opt_name")
        for key in rules.get("by_optimizer", {}).get(optimizer, []):
            self.require(key, ONE)
        if closed and "eval_samples" in rules:
            self.value_check("eval_samples", rules["eval_samples"], " in the closed division")
        if name == "resnet":
            names = []
            for line in self.occurrences("weights_initialization"):
                if "tensor" not in line.metadata:
                    self.fail("weights_initialization without a 'tensor' in its metadata", line)
                else:
                    names.append(line.metadata["tensor"])
            if closed and sorted(names) != sorted(resnet50_tensor_names()):
                expected = set(resnet50_tensor_names())
                missing, extra = sorted(expected - set(names)), sorted(set(names) - expected)
                self.fail("weights_initialization names {} tensors; closed ResNet-50 has 161 (missing: {}; "
                          "not ResNet-50's: {})".format(len(names), ", ".join(missing[:5]) or "none",
                                                        ", ".join(extra[:5]) or "none"))
        if closed:
            test, description = rules["target"]
            values = [line.value for line in self.occurrences("eval_accuracy")]
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if values and not any(test(v) for v in numbers):
                best = (min if name == "gpt3" else max)(numbers) if numbers else None  # perplexity: lower is better
                self.fail("no eval_accuracy reaches the closed target ({}); best {}".format(description, best))


def check(path):
    """Returns (lines, violations, division, benchmark)."""
    lines, errors = parse(path)
    checker = Checker(lines)
    checker.violations += errors
    if not lines:
        checker.fail("no ':::MLLOG' lines in {}".format(path))
        return lines, checker.violations, None, None
    division = checker.first_value("submission_division")
    benchmark = checker.first_value("submission_benchmark")
    checker.common(division)
    checker.benchmark(benchmark, division)
    return lines, checker.violations, division, benchmark


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mllog", help="an MLLOG file (benchhost --mllog FILE)")
    parser.add_argument("--quiet", action="store_true", help="print the violations only")
    args = parser.parse_args(argv)
    try:
        lines, violations, division, benchmark = check(args.mllog)
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
