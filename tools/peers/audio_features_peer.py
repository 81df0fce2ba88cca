#!/usr/bin/python3
"""torch/torchaudio peer of the RNN-T feature pipeline (sdk/include/benchhost/data/audio_features.hpp),
run by tests/audio_features/peer_test.cpp and for the benchmark note.

    audio_features_peer.py MODE DIR      (DIR holds meta.json and raw little-endian float32 arrays)
    audio_features_peer.py bench [SECONDS]

Modes:
    mel       torchaudio.functional.melscale_fbanks(257, 0, 8000, 80, 16000, norm='slaney',
              mel_scale='slaney'), transposed to [80, 257]                       -> fb.bin
    stft      for x0, x1, ... (meta "count"): |torch.stft(x)|^2 with DALI's Spectrogram settings: n_fft 512, hop 160, a 320-sample
              window of DALI's Hann definition w[t] = 0.5 (1 - cos(2 pi (t + 0.5) / 320)) centred
              in the frame, center=True, pad_mode='reflect'; float64; time-major [T, 257]
                                                                       -> power0.bin, ...
    logmel    the evaluation chain after the trim, re-implemented here from DALI's operator docs
              (PreemphasisFilter border 'clamp', Spectrogram as above, MelFilterBank = the
              torchaudio filterbank, ToDecibels(multiplier=ln 10, reference=1,
              cutoff_db=ln 1e-20) = ln(max(x, 1e-20)), Normalize(axes=[1]) with ddof 0 and
              epsilon 0) and features.py's stack_subsample_frames(3, 3); float64
                                                          -> logmel.bin [T, 80], spliced.bin [T', 240]
    resample  for each [in_rate, out_rate] of meta "cases" and its x0, x1, ...:
              torchaudio.functional.resample(x, in_rate, out_rate, lowpass_filter_width=16,
              rolloff=1.0) (its Hann-windowed sinc, the window DALI uses); float64 -> y0.bin, ...
    bench     one SECONDS-long (default 15) 16 kHz utterance through the torch chain on 1 thread,
              median of 5: eval (trim by a moving mean square, dither, pre-emphasis, stft, mel,
              log, normalise, splice) and train (resample to 1.1 x 16 kHz with torchaudio, then
              eval's steps and SpecAugment as features.py draws it); prints JSON lines

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchaudio).
"""

import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torchaudio

N_FFT, WIN, HOP, N_MELS, RATE = 512, 320, 160, 80, 16000


def load(d, meta, name):
    return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype=np.float32).reshape(meta["shapes"][name]).copy())


def save(d, name, t):
    t.detach().cpu().numpy().astype(np.float32).tofile(os.path.join(d, name + ".bin"))


def dali_hann(n, dtype):
    t = torch.arange(n, dtype=dtype)
    return 0.5 * (1.0 - torch.cos(2.0 * math.pi * (t + 0.5) / n))


def fbanks(dtype):
    return torchaudio.functional.melscale_fbanks(N_FFT // 2 + 1, 0.0, RATE / 2, N_MELS, RATE, norm="slaney",
                                                 mel_scale="slaney").to(dtype)  # [257, 80]


def power_spectrogram(x):
    spec = torch.stft(x, n_fft=N_FFT, hop_length=HOP, win_length=WIN, window=dali_hann(WIN, x.dtype), center=True,
                      pad_mode="reflect", return_complex=True)
    return spec.abs().pow(2).T  # [T, 257]


def preemphasis(x, coeff=0.97):
    return torch.cat((x[:1] * (1 - coeff), x[1:] - coeff * x[:-1]))


def normalize(x):  # [T, C], per channel over time, ddof 0, epsilon 0
    mean = x.mean(dim=0, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=0, keepdim=True)
    return (x - mean) / var.sqrt()


def splice(x, stack=3, subsample=3):  # features.py stack_subsample_frames on one utterance, time-major
    seq = [x]
    for n in range(1, stack):
        tmp = torch.zeros_like(x)
        tmp[:-n] = x[n:]
        seq.append(tmp)
    return torch.cat(seq, dim=1)[::subsample]


def log_mel(x, fb):
    mel = power_spectrogram(preemphasis(x)) @ fb
    return normalize(torch.log(torch.clamp(mel, min=1e-20)))


def trim(x, cutoff_db=-60.0, window=2048):
    sq = torch.cat((torch.zeros(1, dtype=x.dtype), (x * x).cumsum(0)))
    idx = torch.arange(1, x.numel() + 1)
    mms = (sq[idx] - sq[(idx - window).clamp(min=0)]) / window
    keep = torch.nonzero(mms >= mms.max() * 10 ** (cutoff_db / 10)).flatten()
    first, last = int(keep[0]), int(keep[-1])
    begin = 0 if first == 0 else max(0, first - (window - 1))
    return x[begin:last + 1]


def spec_augment(x, freq_masks=2, max_freq=20, time_masks=10, max_time=0.03):  # features.py, one utterance [80, T]
    mask = torch.zeros(x.shape, dtype=torch.bool)
    for _ in range(freq_masks):
        w = torch.randint(0, max_freq + 1, size=(1,)).item()
        f0 = torch.randint(0, max(1, x.shape[0] - w + 1), size=(1,))
        mask[f0:f0 + w] = 1
    mt = int(round(x.shape[1] * max_time))
    for _ in range(time_masks):
        w = torch.randint(0, mt + 1, size=(1,)).item()
        t0 = torch.randint(0, max(1, x.shape[1] - w + 1), size=(1,))
        mask[:, t0:t0 + w] = 1
    return x.masked_fill(mask, 0)


def mode_mel(d, meta):
    save(d, "fb", fbanks(torch.float64).T)


def mode_stft(d, meta):
    for i in range(meta["count"]):
        save(d, "power%d" % i, power_spectrogram(load(d, meta, "x%d" % i).double()))


def mode_logmel(d, meta):
    lm = log_mel(load(d, meta, "x").double(), fbanks(torch.float64))
    save(d, "logmel", lm)
    save(d, "spliced", splice(lm))


def mode_resample(d, meta):
    for i, (in_rate, out_rate) in enumerate(meta["cases"]):
        x = load(d, meta, "x%d" % i).double()
        y = torchaudio.functional.resample(x, int(in_rate), int(out_rate), lowpass_filter_width=16, rolloff=1.0)
        save(d, "y%d" % i, y)


def utterance(seconds):
    # Speech-like test signal: 0.5 s of silence each side, harmonics under a syllable-rate envelope, noise.
    g = torch.Generator().manual_seed(1)
    n = int(seconds * RATE)
    t = torch.arange(n, dtype=torch.float32) / RATE
    env = 0.5 * (1 - torch.cos(2 * math.pi * 4 * t))
    x = sum(0.1 / k * torch.sin(2 * math.pi * 140 * k * t) for k in range(1, 8)) * env
    x = x + 0.01 * torch.randn(n, generator=g)
    x[: RATE // 2] = 0
    x[-RATE // 2:] = 0
    return x


def mode_bench(seconds):
    torch.set_num_threads(1)
    x = utterance(seconds)
    fb = fbanks(torch.float32)

    def eval_chain(a):
        a = trim(a)
        a = a + 1e-5 * torch.randn_like(a)
        return splice(log_mel(a, fb))

    def train_chain(a):
        a = torchaudio.functional.resample(a, RATE, int(1.1 * RATE), lowpass_filter_width=16, rolloff=1.0)
        a = trim(a)
        a = a + 1e-5 * torch.randn_like(a)
        lm = log_mel(a, fb)
        return splice(spec_augment(lm.T).T)

    for name, fn in (("eval", eval_chain), ("train", train_chain)):
        fn(x)  # warm-up
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            out = fn(x)
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"bench": "rnnt_features", "impl": "torch {} / torchaudio {}".format(torch.__version__,
                          torchaudio.__version__), "chain": name, "seconds": seconds, "threads": 1,
                          "frames": out.shape[0], "ms_median_of_5": statistics.median(times),
                          "ms_all": [round(v, 3) for v in times]}))


def main():
    mode = sys.argv[1]
    if mode == "bench":
        mode_bench(float(sys.argv[2]) if len(sys.argv) > 2 else 15.0)
        return
    d = sys.argv[2]
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    {"mel": mode_mel, "stft": mode_stft, "logmel": mode_logmel, "resample": mode_resample}[mode](d, meta)


if __name__ == "__main__":
    main()
