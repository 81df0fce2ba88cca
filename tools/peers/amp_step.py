"""One training step under torch.autocast, the same in every peer's bench mode.

    step = amp_step.make(opt, lambda: loss_of(model(x), y), device.type, args.amp)
    step()  # zero_grad, forward and loss under autocast, backward, optimizer step

amp: "none" (fp32; TF32 as torch's defaults set it), "bf16", or "fp16" (with a GradScaler, as
apex and torch.cuda.amp recipes do). loss_fn runs inside the autocast region and returns a scalar.
"""

import torch

DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make(opt, loss_fn, device_type, amp):
    dtype = DTYPES[amp or "none"]
    scaler = torch.cuda.amp.GradScaler() if amp == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    return step
