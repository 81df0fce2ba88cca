#!/usr/bin/python3
"""torchaudio peer of the RNN-T workload's SDK pieces, run by the C++ tests and benches. Each
mode is one function named mode_<name> (add a mode for another RNN-T piece the same way).

    rnnt_peer.py MODE DIR [DIR ...] [options]

The mode runs on each DIR in turn (one Python start-up for several cases). DIR holds meta.json and raw little-endian arrays NAME.bin (float32 or int32, shapes in meta.json's
"shapes"); results are written back to DIR as raw float32 / int64 arrays. Modes:
    transducer_loss  torchaudio.functional.rnnt_loss(logits, labels, logit_lengths, label_lengths,
                     blank, reduction) on DIR's logits.bin [B, T, U+1, V] (f32), labels.bin [B, U],
                     logit_lengths.bin and label_lengths.bin [B] (i32), blank from meta.json.
                     Reduction 'none' with the upstream gradient dloss.bin [B]
                        -> loss_none.bin [B], grad_none.bin (d sum(loss * dloss) / d logits)
                     and 'mean' with upstream gradient 1  -> loss_mean.bin [1], grad_mean.bin
                     (gradients by autograd, in float32: torchaudio's kernels are f32/f16 only)
    edit_distance    torchaudio.functional.edit_distance(hyp.split(), ref.split()) for each line
                     "hypothesis|reference" of DIR/pairs.txt (UTF-8)    -> distances.bin (int64)
    model_step       the whole RNN-T (model.py's architecture with torch.nn.LSTM, dropout off) and
                     torchaudio's rnnt_loss ('mean', blank = V - 1) on DIR's features.bin [T, B, F]
                     (f32, time-major), labels.bin [B, U], feature_lengths.bin and label_lengths.bin
                     [B] (i32, frames before StackTime), with the weights param.<name>.bin (the
                     reference's state_dict names) and the sizes in meta.json "config"
                        -> loss.bin [1], grad.<name>.bin per parameter (autograd, float32)
    bench_model_step times a training step (forward, rnnt_loss, backward, clip, Adam) of the
                     model of meta.json's "config" on random data of its "shape" [T, B, U]
                     (--threads, --warmup, --iters); prints one JSON line {"ms": [...], "median_ms": m}
    bench_transducer_loss  times rnnt_loss forward + backward (reduction 'mean') on DIR's arrays:
                     --threads N (torch.set_num_threads), --warmup W, --iters I; prints one JSON
                     line {"ms": [...], "median_ms": m}

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchaudio).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torchaudio


def load(d, meta, name, dtype):
    shape = meta["shapes"][name]
    return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype=dtype).reshape(shape).copy())


def save(d, name, t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    a = a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int64)
    a.tofile(os.path.join(d, name + ".bin"))


def loss_inputs(d, meta):
    logits = load(d, meta, "logits", np.float32)
    labels = load(d, meta, "labels", np.int32)
    logit_lengths = load(d, meta, "logit_lengths", np.int32)
    label_lengths = load(d, meta, "label_lengths", np.int32)
    return logits, labels, logit_lengths, label_lengths


def mode_transducer_loss(d, meta, args):
    logits, labels, logit_lengths, label_lengths = loss_inputs(d, meta)
    blank = int(meta["blank"])
    dloss = load(d, meta, "dloss", np.float32)
    for reduction in ("none", "mean"):
        x = logits.clone().requires_grad_(True)
        loss = torchaudio.functional.rnnt_loss(x, labels, logit_lengths, label_lengths, blank=blank,
                                               reduction=reduction)
        (loss * dloss).sum().backward() if reduction == "none" else loss.backward()
        save(d, "loss_" + reduction, loss.reshape(-1))
        save(d, "grad_" + reduction, x.grad)


class PeerRnnt(torch.nn.Module):
    """RNN-T as the MLPerf reference builds it (rnnt/model.py), written from its description."""

    def __init__(self, c):
        super().__init__()
        self.factor = c["enc_stack_time_factor"]
        self.pre_rnn = torch.nn.LSTM(c["in_features"], c["enc_n_hid"], c["enc_pre_rnn_layers"])
        self.post_rnn = torch.nn.LSTM(self.factor * c["enc_n_hid"], c["enc_n_hid"], c["enc_post_rnn_layers"])
        self.embed = torch.nn.Embedding(c["n_classes"] - 1, c["pred_n_hid"])
        self.dec_rnn = torch.nn.LSTM(c["pred_n_hid"], c["pred_n_hid"], c["pred_rnn_layers"])
        self.joint_enc = torch.nn.Linear(c["enc_n_hid"], c["joint_n_hid"])
        self.joint_pred = torch.nn.Linear(c["pred_n_hid"], c["joint_n_hid"])
        self.joint_out = torch.nn.Linear(c["joint_n_hid"], c["n_classes"])

    def named_reference_parameters(self):
        """(state_dict name of the reference, parameter)."""
        rename = {"pre_rnn.": "encoder.pre_rnn.lstm.", "post_rnn.": "encoder.post_rnn.lstm.",
                  "embed.": "prediction.embed.", "dec_rnn.": "prediction.dec_rnn.lstm.",
                  "joint_out.": "joint_net.2."}
        for name, p in self.named_parameters():
            for a, b in rename.items():
                if name.startswith(a):
                    name = b + name[len(a):]
            yield name, p

    def stack_time(self, x):
        # Frame t' of the output: frames f t' .. f t' + f - 1 side by side, zeros past the end.
        shifted = [x]
        for i in range(1, self.factor):
            s = torch.zeros_like(x)
            s[:-i] = x[i:]
            shifted.append(s)
        return torch.cat(shifted, dim=2)[::self.factor]

    def forward(self, x, labels):
        y, _ = self.pre_rnn(x)
        y, _ = self.post_rnn(self.stack_time(y))
        f = self.joint_enc(y.transpose(0, 1))                       # [B, T', J]
        e = self.embed(labels.long())                                # [B, U, P]
        e = torch.cat([torch.zeros_like(e[:, :1]), e], dim=1)       # the zero SOS vector first
        g, _ = self.dec_rnn(e.transpose(0, 1))
        g = self.joint_pred(g.transpose(0, 1))                      # [B, U+1, J]
        h = torch.relu(f.unsqueeze(2) + g.unsqueeze(1))
        return self.joint_out(h)                                    # [B, T', U+1, V]


def model_inputs(d, meta):
    c = meta["config"]
    model = PeerRnnt(c)
    with torch.no_grad():
        for name, p in model.named_reference_parameters():
            p.copy_(load(d, meta, "param." + name, np.float32))
    x = load(d, meta, "features", np.float32)
    labels = load(d, meta, "labels", np.int32)
    flen = load(d, meta, "feature_lengths", np.int32)
    llen = load(d, meta, "label_lengths", np.int32)
    frames = ((flen + model.factor - 1) // model.factor).to(torch.int32)
    return model, x, labels, frames, llen


def model_loss(model, x, labels, frames, llen):
    logits = model(x, labels)
    return torchaudio.functional.rnnt_loss(logits, labels, frames, llen, blank=logits.shape[-1] - 1,
                                           reduction="mean")


def mode_model_step(d, meta, args):
    torch.set_num_threads(args.threads)
    model, x, labels, frames, llen = model_inputs(d, meta)
    loss = model_loss(model, x, labels, frames, llen)
    loss.backward()
    save(d, "loss", loss.reshape(-1))
    for name, p in model.named_reference_parameters():
        save(d, "grad." + name, p.grad)


def mode_bench_model_step(d, meta, args):
    """A training step on random data of meta.json's "config" and "shape" (T, B, U): forward,
    rnnt_loss, backward, global-norm clip 1 and an Adam step (torch has no LAMB; the step's cost
    is the same order: a few passes over the weights)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    c = meta["config"]
    t, b, u = meta["shape"]
    dev = torch.device(args.device)
    model = PeerRnnt(c).to(dev)
    x = torch.randn(t, b, c["in_features"]).to(dev)
    labels = torch.randint(0, c["n_classes"] - 1, (b, u), dtype=torch.int32).to(dev)
    frames = torch.full((b,), (t + model.factor - 1) // model.factor, dtype=torch.int32).to(dev)
    llen = torch.full((b,), u, dtype=torch.int32).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-9)
    times = []
    for i in range(args.warmup + args.iters):
        start = time.perf_counter()
        opt.zero_grad()
        loss = model_loss(model, x, labels, frames, llen)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        elapsed = (time.perf_counter() - start) * 1e3
        if i >= args.warmup:
            times.append(elapsed)
    median = statistics.median(times)
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "device": args.device, "threads": args.threads,
                      "ms": [round(t, 2) for t in times], "median_ms": round(median, 2),
                      "samples_per_second": round(b * 1e3 / median, 2), "loss": float(loss)}))


def mode_edit_distance(d, meta, args):
    out = []
    with open(os.path.join(d, "pairs.txt"), encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            hyp, ref = line.split("|")
            out.append(torchaudio.functional.edit_distance(hyp.split(), ref.split()))
    save(d, "distances", np.array(out, dtype=np.int64))


def mode_bench_transducer_loss(d, meta, args):
    torch.set_num_threads(args.threads)
    logits, labels, logit_lengths, label_lengths = loss_inputs(d, meta)
    blank = int(meta["blank"])
    times = []
    for i in range(args.warmup + args.iters):
        x = logits.detach().requires_grad_(True)
        start = time.perf_counter()
        loss = torchaudio.functional.rnnt_loss(x, labels, logit_lengths, label_lengths, blank=blank,
                                               reduction="mean")
        loss.backward()
        elapsed = (time.perf_counter() - start) * 1e3
        if i >= args.warmup:
            times.append(elapsed)
    print(json.dumps({"impl": "torchaudio", "threads": args.threads, "ms": [round(t, 2) for t in times],
                      "median_ms": round(statistics.median(times), 2), "loss": float(loss)}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode")
    p.add_argument("dirs", nargs="+", metavar="dir")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--device", default="cpu", help="bench_model_step: cpu or cuda")
    args = p.parse_args()
    fn = globals().get("mode_" + args.mode)
    if fn is None:
        sys.exit("rnnt_peer.py: unknown mode %r" % args.mode)
    for d in args.dirs:
        meta_path = os.path.join(d, "meta.json")
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        fn(d, meta, args)


if __name__ == "__main__":
    main()
