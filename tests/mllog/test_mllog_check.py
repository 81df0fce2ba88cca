"""tools/mllog_check.py: a log built to the MLPerf Training v3.0 rules passes, and each log that
breaks one rule fails with a message naming it. The rules are the ones this build's plugins declare
(`benchhost list --json`, the executable named by $BENCHHOST)."""

import json
import os
import tempfile
import unittest

import mllog_check

DECLARATIONS = mllog_check.load_declarations(benchhost=os.environ.get("BENCHHOST"))


def resnet50_tensor_names():
    """The 161 tensor names the resnet50 plugin declares for closed ResNet-50."""
    for entry in DECLARATIONS["resnet"]["mlperf"]["keys"]:
        if entry["key"] == "weights_initialization":
            return list(entry["closed_metadata_values"])
    raise AssertionError("the resnet declaration has no weights_initialization key")

GPT3_CLOSED = {
    "global_batch_size": 1536, "max_sequence_length": 2048, "opt_name": "adam",
    "opt_base_learning_rate": 2e-5, "opt_end_learning_rate": 2e-6, "opt_learning_rate_decay_steps": 108600,
    "opt_learning_rate_warmup_steps": 265, "opt_learning_rate_decay_schedule": "cosine with linear warmup",
    "opt_adam_beta_1": 0.9, "opt_adam_beta_2": 0.95, "opt_adam_epsilon": 1e-8, "opt_gradient_clip_norm": 1.0,
    "gradient_accumulation_steps": 1, "init_checkpoint_step": 4000,
}
BERT = {
    "global_batch_size": 16, "gradient_accumulation_steps": 1, "opt_base_learning_rate": 0.005,
    "opt_lamb_epsilon": 1e-6, "opt_learning_rate_training_steps": 4000, "opt_learning_rate_warmup_steps": 100,
    "num_warmup_steps": 100, "start_warmup_step": 0, "opt_lamb_beta_1": 0.9, "opt_lamb_beta_2": 0.999,
    "opt_lamb_weight_decay_rate": 0.01,
}


UNET3D = {
    "global_batch_size": 2, "gradient_accumulation_steps": 1, "opt_name": "sgd", "opt_base_learning_rate": 0.8,
    "opt_learning_rate_warmup_epochs": 200, "opt_learning_rate_decay_boundary_epochs": [],
    "opt_learning_rate_decay_factor": 1.0, "opt_weight_decay": 0.0, "opt_momentum": 0.9, "oversampling": 0.4,
    "training_input_shape": [128, 128, 128], "validation_input_shape": [128, 128, 128], "validation_overlap": 0.5,
}

# A Mask R-CNN-like declaration (mlperf_rules.hpp, Note [Dictionary-valued targets]): eval_accuracy is
# {"BBOX": b, "SEGM": s}; closed_maskrcnn.yaml's target, and open_maskrcnn.yaml's "each below 1".
MASKRCNN_LIKE = {
    "name": "maskrcnn_like", "benchmark": "maskrcnn_like", "metric": {"direction": "max"},
    "mlperf": {"closed_division": True, "keys": [],
               "closed_target_fields": [
                   {"field": "BBOX", "check": {"min": 0.377, "min_exclusive": False, "max": 1.0, "max_exclusive": True}},
                   {"field": "SEGM", "check": {"min": 0.339, "min_exclusive": False, "max": 1.0, "max_exclusive": True}}],
               "open_target_fields": [
                   {"field": "BBOX", "check": {"min": 0.0, "min_exclusive": False, "max": 1.0, "max_exclusive": True}},
                   {"field": "SEGM", "check": {"min": 0.0, "min_exclusive": False, "max": 1.0, "max_exclusive": True}}]}}
MASKRCNN_HYPER = {"global_batch_size": 8, "gradient_accumulation_steps": 1}


def record(key, value=None, event="POINT_IN_TIME", time_ms=0, **metadata):
    meta = {"file": "core/run_modes.cpp", "lineno": 1}
    meta.update(metadata)
    return {"namespace": "", "time_ms": time_ms, "event_type": event, "key": key, "value": value, "metadata": meta}


def run_log(benchmark, division, hyper, accuracies=(0.5,), extra_tensors=()):
    """A whole time-to-train log, in the order benchhost writes it."""
    out = [record("submission_benchmark", benchmark), record("submission_org", "benchhost"),
           record("submission_division", division), record("submission_status", "onprem"),
           record("submission_platform", "test"), record("cache_clear", True),
           record("init_start", event="INTERVAL_START"), record("seed", 1)]
    out += [record(k, v) for k, v in hyper.items()]
    out += [record("weights_initialization", tensor=t) for t in extra_tensors]
    out += [record("train_samples", 1000), record("eval_samples", 100),
            record("init_stop", event="INTERVAL_END", time_ms=10), record("run_start", event="INTERVAL_START", time_ms=10),
            record("epoch_start", event="INTERVAL_START", time_ms=11, epoch_num=1)]
    t = 12
    for i, acc in enumerate(accuracies):
        meta = {"epoch_num": (i + 1) / len(accuracies), "samples_count": 100 * (i + 1)}
        out += [record("eval_start", event="INTERVAL_START", time_ms=t, **meta),
                record("eval_accuracy", acc, time_ms=t + 1, **meta),
                record("eval_stop", event="INTERVAL_END", time_ms=t + 2, **meta)]
        t += 3
    out += [record("epoch_stop", event="INTERVAL_END", time_ms=t, epoch_num=1),
            record("trained_samples", 1000, time_ms=t),
            record("run_stop", event="INTERVAL_END", time_ms=t + 1, status="success")]
    return out


class MllogCheckTest(unittest.TestCase):
    def check(self, records, raw_lines=(), declarations=None):
        fd, path = tempfile.mkstemp(suffix=".mllog")
        with os.fdopen(fd, "w") as f:
            f.write("benchhost: a console line that is not MLLOG\n")
            for r in records:
                f.write(":::MLLOG " + json.dumps(r) + "\n")
            for line in raw_lines:
                f.write(line + "\n")
        try:
            return mllog_check.check(path, DECLARATIONS if declarations is None else declarations)[1]
        finally:
            os.remove(path)

    def assertViolation(self, violations, *fragments):
        for v in violations:
            if all(f in v for f in fragments):
                return
        self.fail("no violation mentions {}; got {}".format(fragments, violations))

    def test_a_log_built_to_the_rules_passes(self):
        self.assertEqual(self.check(run_log("gpt3", "closed", GPT3_CLOSED, accuracies=(3.5, 2.68))), [])
        self.assertEqual(self.check(run_log("bert", "open", BERT)), [])
        names = resnet50_tensor_names()
        self.assertEqual(len(names), 161)
        self.assertEqual(len(set(names)), 161)

    def test_a_key_logged_twice_or_never(self):
        log = run_log("bert", "open", BERT)
        log.insert(-1, record("eval_samples", 100, time_ms=log[-1]["time_ms"]))
        self.assertViolation(self.check(log), "'eval_samples'", "exactly one required, 2 found")
        hyper = dict(BERT)
        del hyper["opt_lamb_beta_2"]
        self.assertViolation(self.check(run_log("bert", "open", hyper)), "'opt_lamb_beta_2'", "0 found")

    def test_closed_values_are_exact(self):
        hyper = dict(GPT3_CLOSED, opt_adam_beta_2=0.949999988079071)  # 0.95 rounded through a float
        self.assertViolation(self.check(run_log("gpt3", "closed", hyper, accuracies=(2.68,))),
                             "'opt_adam_beta_2'", "0.949999988079071")
        # The open division fixes no values.
        self.assertEqual(self.check(run_log("gpt3", "open", hyper)), [])

    def test_closed_needs_the_quality_target(self):
        self.assertViolation(self.check(run_log("gpt3", "closed", GPT3_CLOSED, accuracies=(3.1, 2.9))),
                             "closed target")

    def test_open_unet3d_needs_a_score_below_one(self):
        # open_unet3d.yaml: at least one eval_accuracy < 1.0 (a perfect score on trivial data is not a result).
        self.assertEqual(self.check(run_log("unet3d", "open", UNET3D, accuracies=(0.5, 1.0))), [])
        self.assertViolation(self.check(run_log("unet3d", "open", UNET3D, accuracies=(1.0,))), "open target")
        # Other benchmarks' open rules ask nothing of the value.
        self.assertEqual(self.check(run_log("bert", "open", BERT, accuracies=(1.0,))), [])

    def test_closed_resnet_names_its_161_tensors(self):
        hyper = {"global_batch_size": 256, "gradient_accumulation_steps": 1, "opt_name": "sgd",
                 "sgd_opt_base_learning_rate": 0.1, "sgd_opt_end_learning_rate": 1e-4,
                 "sgd_opt_learning_rate_decay_poly_power": 2, "sgd_opt_learning_rate_decay_steps": 1000,
                 "sgd_opt_weight_decay": 5e-5, "sgd_opt_momentum": 0.9,
                 "opt_learning_rate_decay_boundary_epochs": []}
        names = resnet50_tensor_names()
        self.assertEqual(self.check(run_log("resnet", "closed", hyper, (0.76,), names)), [])
        self.assertViolation(self.check(run_log("resnet", "closed", hyper, (0.76,), names[:-1] + ["stem_weight"])),
                             "weights_initialization", "stem_weight")
        del hyper["sgd_opt_momentum"]
        self.assertViolation(self.check(run_log("resnet", "open", hyper, (0.76,), names)), "'sgd_opt_momentum'")

    def test_order_of_the_run_markers(self):
        log = run_log("bert", "open", BERT)
        stop = next(i for i, r in enumerate(log) if r["key"] == "init_stop")
        start = next(i for i, r in enumerate(log) if r["key"] == "run_start")
        log[stop], log[start] = log[start], log[stop]
        self.assertViolation(self.check(log), "run_start before init_stop")
        log = [r for r in run_log("bert", "open", BERT) if r["key"] != "run_stop"]
        self.assertViolation(self.check(log), "'run_stop'", "0 found")

    def test_metadata_the_rules_ask_for(self):
        log = run_log("bert", "open", BERT)
        for r in log:
            if r["key"] == "eval_accuracy":
                del r["metadata"]["epoch_num"]
        self.assertViolation(self.check(log), "eval_accuracy needs 'epoch_num'")
        log = run_log("bert", "open", BERT)
        del log[-1]["metadata"]["status"]
        self.assertViolation(self.check(log), "run_stop without a 'status'")

    def test_malformed_lines(self):
        log = run_log("bert", "open", BERT)
        violations = self.check(log, raw_lines=[":::MLLOG {\"namespace\": \"\", \"time_ms\": ",
                                                ":::MLLOG " + json.dumps({"key": "x"})])
        self.assertViolation(violations, "not JSON")
        self.assertViolation(violations, "no 'namespace' field")
        log[3]["value"] = "somewhere"
        self.assertViolation(self.check(log), "'submission_status'", "somewhere")

    def test_time_never_goes_back(self):
        log = run_log("bert", "open", BERT)
        log[-1]["time_ms"] = 0
        self.assertViolation(self.check(log), "goes back")

    def test_every_shipped_benchmark_is_declared(self):
        for benchmark in ("resnet", "bert", "gpt3", "dlrm_dcnv2", "unet3d", "ssd", "rnnt"):
            self.assertIn(benchmark, DECLARATIONS)
            self.assertTrue(DECLARATIONS[benchmark]["mlperf"]["closed_division"], benchmark)

    def test_a_benchmark_only_its_plugin_declares(self):
        # A third-party plugin's benchmark: its own keys, no closed-division reference.
        mine = {"name": "mlp", "benchmark": "fashion_mlp", "metric": {"direction": "max"},
                "mlperf": {"closed_division": False,
                           "keys": [{"key": "opt_name", "check": {"one_of": ["adam"]}}]}}
        declarations = dict(DECLARATIONS, fashion_mlp=mine)
        hyper = {"global_batch_size": 64, "gradient_accumulation_steps": 1, "opt_name": "adam"}
        self.assertEqual(self.check(run_log("fashion_mlp", "open", hyper), declarations=declarations), [])
        self.assertViolation(self.check(run_log("fashion_mlp", "open", dict(hyper, opt_name="sgd")),
                                        declarations=declarations), "'opt_name'", "sgd")
        self.assertViolation(self.check(run_log("fashion_mlp", "closed", hyper), declarations=declarations),
                             "no closed-division rules")
        self.assertViolation(self.check(run_log("fashion_mlp", "open", hyper)), "'submission_benchmark'",
                             "fashion_mlp")

    def test_a_plugin_without_a_benchmark_key_is_checked_under_its_name(self):
        # The host logs submission_benchmark as the plugin's name when it declares no benchmark.
        declarations = mllog_check.declarations_from({"plugins": [
            {"name": "mlp", "benchmark": "", "mlperf": {"keys": [{"key": "opt_name"}]}}]})
        hyper = {"global_batch_size": 64, "gradient_accumulation_steps": 1, "opt_name": "adam"}
        self.assertEqual(self.check(run_log("mlp", "open", hyper), declarations=declarations), [])
        del hyper["opt_name"]
        self.assertViolation(self.check(run_log("mlp", "open", hyper), declarations=declarations), "'opt_name'")

    def check_maskrcnn_like(self, division, accuracies):
        declarations = dict(DECLARATIONS, maskrcnn_like=MASKRCNN_LIKE)
        return self.check(run_log("maskrcnn_like", division, MASKRCNN_HYPER, accuracies=accuracies),
                          declarations=declarations)

    def test_a_dictionary_eval_accuracy_is_checked_field_by_field(self):
        reached = ({"BBOX": 0.2, "SEGM": 0.18}, {"BBOX": 0.381, "SEGM": 0.342})
        self.assertEqual(self.check_maskrcnn_like("closed", reached), [])
        self.assertEqual(self.check_maskrcnn_like("open", reached), [])
        # Below the closed target in one field; each field reaching it only in a different evaluation.
        self.assertViolation(self.check_maskrcnn_like("closed", ({"BBOX": 0.381, "SEGM": 0.338},)),
                             "closed target", "BBOX >= 0.377 and < 1.0 and SEGM >= 0.339 and < 1.0")
        self.assertViolation(self.check_maskrcnn_like("closed", ({"BBOX": 0.38, "SEGM": 0.3},
                                                                 {"BBOX": 0.3, "SEGM": 0.35})),
                             "closed target", "in one evaluation")
        # Open: some evaluation with each field below 1.
        self.assertViolation(self.check_maskrcnn_like("open", ({"BBOX": 1.0, "SEGM": 0.5},)), "open target")
        self.assertEqual(self.check_maskrcnn_like("open", ({"BBOX": 1.0, "SEGM": 0.5}, {"BBOX": 0.5, "SEGM": 0.4})), [])

    def test_a_dictionary_needs_every_declared_field(self):
        for division in ("closed", "open"):
            violations = self.check_maskrcnn_like(division, ({"BBOX": 0.381}, {"BBOX": 0.39, "SEGM": 0.35}))
            self.assertViolation(violations, "eval_accuracy", "lacks the field SEGM")
        self.assertViolation(self.check_maskrcnn_like("closed", ({"SEGM": 0.35, "bbox": 0.39},)),
                             "lacks the field BBOX")
        # A field that is not a number reaches nothing.
        self.assertViolation(self.check_maskrcnn_like("closed", ({"BBOX": "0.39", "SEGM": 0.35},)), "closed target")

    def test_a_number_where_a_dictionary_is_expected_and_the_reverse(self):
        self.assertViolation(self.check_maskrcnn_like("open", (0.38,)), "eval_accuracy is 0.38",
                             "logs a dictionary with the fields BBOX, SEGM")
        self.assertViolation(self.check(run_log("bert", "open", BERT, accuracies=({"BBOX": 0.4, "SEGM": 0.4},))),
                             "eval_accuracy is a dictionary", "'bert' logs a number")
        self.assertViolation(self.check(run_log("gpt3", "closed", GPT3_CLOSED, accuracies=({"loss": 2.6},))),
                             "eval_accuracy is a dictionary")

    def test_an_empty_file(self):
        self.assertViolation(self.check([]), "no ':::MLLOG' lines")


if __name__ == "__main__":
    unittest.main()
