"""What stack frames look like: Python tracebacks, py-spy and faulthandler dumps, and the
code locations that place a frame in a subsystem. Shared by the traceback and stack passes."""

from __future__ import annotations

# A Python traceback frame: `  File "train.py", line 12, in main` (faulthandler: `line 12 in main`).
FRAME = r'File "[^"]+", line \d+'
# Both may follow a launcher's `[rank3]:` / `[default3]:` prefix.
# The header of one thread in a live dump: py-spy `Thread 120142 (idle): "MainThread"` (older
# py-spy `Thread 0x7FA6E7C01740 (idle): "MainThread"`),
# faulthandler `Thread 0x00007f… (most recent call first):` / `Current thread 0x… (…):`,
# gdb's `thread apply all bt` `Thread 4 (Thread 0x7fd09a759000 (LWP 3913167) "cuda00006000019"):`.
THREAD_HEADER = (
    r"(?:^|\]:)\s*(?:Thread (?:\d+|0x[0-9a-fA-F]+) \(\w+\)(?:: \"[^\"]*\")?"
    r"|(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"
    r"|Thread \d+ \(Thread 0x[0-9a-fA-F]+ \(LWP \d+\)(?: \"[^\"]*\")?\):?)\s*$"
)
# A gdb backtrace frame: `#5  0x00007fd4dbc6ba38 in cudaStreamSynchronize () from /usr/lib/libcudart.so`,
# an inlined one without its address `#15 groupLaunch (job_=<optimized out>) at group.cc:325`.
GDB_FRAME = r"^#\d+ +(?:0x[0-9a-fA-F]+ in )?[^\s(]+ ?\("
# A frame line of any dumper: py-spy `    func (file.py:12)`, faulthandler `  File "file.py", line 12 in func`, gdb's.
STACK_FRAME = r"(?:^|\]:)\s+(?:\S+ \([^()]+:\d+\)|File \"[^\"]+\", line \d+ in \S+)\s*$|" + GDB_FRAME

# Checkpoint I/O, never activation checkpointing (torch/utils/checkpoint.py, checkpoint_wrapper):
# torch's own modules, the frameworks' checkpoint modules (mmengine's CheckpointHook, Composer's
# trainer/checkpoint.py, Lightning's connector and ModelCheckpoint, DeepSpeed's checkpoint engine, a
# module named for checkpoint storage (PyTorch-BigGraph's checkpoint_storage.py, a checkpoint_manager.py),
# TensorFlow's Saver and tf.train.Checkpoint), any function that saves, loads, downloads or
# restores a checkpoint (`save_checkpoint`, `write_ckpt`), and a function called just `save`,
# `save_weights` or `save_model` (Keras and tf.keras write weights there).
CHECKPOINT_FRAMES = (
    r"torch/serialization\.py|torch/distributed/checkpoint/|dist_checkpointing/|safetensors"
    r"|hooks/checkpoint_hook\.py|trainer/checkpoint\.py|checkpoint_connector\.py|callbacks/\w*model_checkpoint\.py|checkpoint_engine/"
    r"|checkpoint_(?:storage|manager|io)\.py"
    r"|\b_{0,2}(?:save|load|download|restore)_(?:zero_)?checkpoint\b|in _save\b"
    r"|tensorflow/python/training/saver\.py|tensorflow/python/checkpoint/|\b(?:save|write|load|read|restore)_ckpt\b|, in save(?:_weights|_model)?\s*$"
)
# The data pipeline: torch's DataLoader machinery, Hugging Face `datasets`, Ray Data, a package folder named
# for data loading (nnU-Net's `training/dataloading/`), a project's `datasets/` package, and any function of a file named for
# datasets or loaders (`dataset.py`, `coco_dataset.py`, `data_loader.py`); never such a file's
# module level (`in <module>`: an import that failed says nothing about data).
DATALOADER_FRAMES = (
    r"torch/utils/data/|in _worker_loop\b|(?:site|dist)-packages/(?:datasets|ray/data)/|[\\/]data_?load(?:ing|ers?)[\\/]"
    r"|(?i:[\w-]*(?:dataset|data_?loader)[\w-]*\.py)\", line \d+, in \w"
    r"|[\\/]datasets[\\/](?:[\w-]+[\\/])*[\w-]+\.py\", line \d+, in \w"  # a project's datasets/ package: `yolox/data/datasets/mot.py`
    r"|, in (?:\w+_)?(?:get|next|fetch|load)_batch\w*$|, in batch_producer$"  # Megatron's `get_batch_on_this_tp_rank`, OpenNMT's producer
)
