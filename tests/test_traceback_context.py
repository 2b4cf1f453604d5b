"""Unrecognized exceptions are classified by the frames of their traceback."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.ingest.rank_logs import TextFile, read_text_files
from forensics.passes.traceback_context import classify_by_frames
from forensics.schema import FINDINGS, empty

SAVE_TRACEBACK = """\
Traceback (most recent call last):
  File "train.py", line 250, in <module>
    torch.save(model.state_dict(), path)
  File "/venv/lib/python3.7/site-packages/torch/serialization.py", line 297, in _save
    serialized_storages[key]._write_file(f, _should_read_directly(f))
RuntimeError: write(): fd 29 failed with Input/output error
"""

CONFIG_TRACEBACK = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 88, in probe
[rank3]:     spec = layers[name]
[rank3]: KeyError: 'decoder.layers.11.mlp'
"""


def _lines(tmp_path: Path, text: str):
    (tmp_path / "console.log").write_text(text)
    lines, _, _ = read_text_files(tmp_path, [TextFile("console.log", None)])
    return lines


def test_exception_inside_torch_save_is_checkpoint_io(tmp_path):
    findings = classify_by_frames(_lines(tmp_path, SAVE_TRACEBACK), empty(FINDINGS))
    assert findings.select("category", "line", "role").rows() == [("CHECKPOINT_IO", 6, "initiating")]
    assert "serialization.py" in findings["captures"][0]


def test_exception_outside_known_subsystems_stays_unclassified(tmp_path):
    assert classify_by_frames(_lines(tmp_path, CONFIG_TRACEBACK), empty(FINDINGS)).is_empty()


def test_platform_timestamp_before_rank_prefix_keeps_the_rank(tmp_path):
    lines = _lines(tmp_path, "2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: CUDA out of memory.\n")
    assert lines["rank"].to_list() == [3]


SHM_EXCERPT = """\
  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__
    sl = self._semlock = _multiprocessing.SemLock(
OSError: [Errno 28] No space left on device
"""


def test_generic_errno_yields_to_the_frames_that_say_where(tmp_path):
    from forensics.catalog import load_catalog
    from forensics.catalog.match import match_catalog
    from forensics.passes.traceback_context import demote_overridden

    lines = _lines(tmp_path, SHM_EXCERPT)  # a paste that starts mid-traceback
    generic = match_catalog(lines, load_catalog())
    assert "CHECKPOINT_IO" in generic["category"].to_list()
    context = classify_by_frames(lines, generic)
    assert context.select("category", "line").rows() == [("ENVIRONMENT", 3)]
    demoted = demote_overridden(generic, context, lines)
    assert demoted.filter(demoted["category"] == "CHECKPOINT_IO")["role"].to_list() == ["symptom"]


# roytseng-tw/Detectron.pytorch#140 (real lines): a hung run interrupted by hand while a worker waited on a lock.
INTERRUPTED_IN_A_LOCK = """\
Exception ignored in: <bound method _DataLoaderIter.__del__ of <torch.utils.data.dataloader._DataLoaderIter object at 0x7f33d805aa20>>
Traceback (most recent call last):
  File "/home/bcheng/anaconda3/lib/python3.6/site-packages/torch/utils/data/dataloader.py", line 349, in __del__
Process Process-19:
    self._shutdown_workers()
  File "/home/bcheng/anaconda3/lib/python3.6/site-packages/torch/utils/data/dataloader.py", line 340, in _shutdown_workers
    self.worker_result_queue.put(None)
  File "/home/bcheng/anaconda3/lib/python3.6/multiprocessing/queues.py", line 346, in put
    with self._wlock:
  File "/home/bcheng/anaconda3/lib/python3.6/multiprocessing/synchronize.py", line 96, in __enter__
    return self._semlock.__enter__()
KeyboardInterrupt:
"""


def test_an_interrupt_inside_a_multiprocessing_lock_is_no_full_shm(tmp_path):
    found = classify_by_frames(_lines(tmp_path, INTERRUPTED_IN_A_LOCK), empty(FINDINGS))
    assert "ENVIRONMENT" not in found["category"].to_list()


ABORTED_BROADCAST = """\
[rank6]: Traceback (most recent call last):
[rank6]:   File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 3504, in broadcast_object_list
[rank6]:     object_list[i] = _tensor_to_object(obj_view, obj_size, group)
[rank6]:   File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2961, in _tensor_to_object
[rank6]:     return _unpickler(io.BytesIO(buf)).load()
[rank6]: EOFError: Ran out of input
"""  # modelscope/ms-swift#4340: the broadcast was aborted under rank 6 while its source rank was still packing


def test_an_exception_out_of_a_collective_call_is_a_cascade_of_that_collective(tmp_path):
    found = classify_by_frames(_lines(tmp_path, ABORTED_BROADCAST), empty(FINDINGS))
    assert found.select("pattern", "category", "role", "rank").rows() == [("CTX006", "COLLECTIVE_TIMEOUT", "cascade", 6)]


# mosaicml/composer#290: a checkpoint archive missing on load, raised in Composer's trainer/checkpoint.py.
COMPOSER_LOAD = """\
Traceback (most recent call last):
  File "/workspace/src/composer/composer/trainer/checkpoint.py", line 198, in _download_checkpoint
    with tarfile.open(rank_zero_checkpoint_archive_filepath) as tarball:
  File "/usr/lib/python3.8/tarfile.py", line 1603, in open
    return func(name, "r", fileobj, **kwargs)
FileNotFoundError: [Errno 2] No such file or directory: '/tmp/tmpj8wdttfd/rank_0.it14000_8979.tar'
"""

# open-mmlab/mmdetection#12069: the paste ends inside mmengine's CheckpointHook.
MMENGINE_SAVE_CUT = """\
Traceback (most recent call last):
  File "/mnt/wzh/miniconda3/envs/openmmlab/lib/python3.8/site-packages/mmengine/runner/runner.py", line 1839, in call_hook
    getattr(hook, fn_name)(self, **kwargs)
  File "/mnt/wzh/miniconda3/envs/openmmlab/lib/python3.8/site-packages/mmengine/hooks/checkpoint_hook.py", line 345, in after_train_epoch
    self._save_checkpoint(runner)
"""

# Activation checkpointing is not checkpoint I/O: torch/utils/checkpoint.py re-runs the forward
# (modelscope/ms-swift#4858's frames, the paste cut after them).
RECOMPUTE_CUT = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/root/miniconda3/lib/python3.10/site-packages/torch/utils/checkpoint.py", line 1125, in unpack_hook
[rank0]:     frame.recompute_fn(*args)
[rank0]:   File "/root/miniconda3/lib/python3.10/site-packages/torch/utils/checkpoint.py", line 1507, in recompute_fn
[rank0]:     with torch.random.fork_rng(
"""


# facebookresearch/PyTorch-BigGraph#142: a trainer whose embeddings partition is on another machine's disk.
BIGGRAPH_PARTITION_MISSING = """\
Traceback (most recent call last):
  File "/root/miniconda3/lib/python3.7/site-packages/torchbiggraph/checkpoint_storage.py", line 341, in load_entity_partition
    with h5py.File(path, "r") as hf:
  File "/root/miniconda3/lib/python3.7/site-packages/h5py/_hl/files.py", line 408, in __init__
    swmr=swmr)
  File "/root/miniconda3/lib/python3.7/site-packages/h5py/_hl/files.py", line 173, in make_fid
    fid = h5f.open(name, flags, fapl=fapl)
  File "h5py/_objects.pyx", line 54, in h5py._objects.with_phil.wrapper
  File "h5py/_objects.pyx", line 55, in h5py._objects.with_phil.wrapper
  File "h5py/h5f.pyx", line 88, in h5py.h5f.open
OSError: Unable to open file (unable to open file: name = '/root/data/release/kgc_full/model/embeddings_schemaorg:BodyOfWater_1.v1.h5', errno = 2, error message = 'No such file or directory', flags = 0, o_flags = 0)
"""


def test_framework_checkpoint_modules_are_checkpoint_io_and_activation_checkpointing_is_not(tmp_path):
    for text in (COMPOSER_LOAD, MMENGINE_SAVE_CUT, BIGGRAPH_PARTITION_MISSING):
        findings = classify_by_frames(_lines(tmp_path, text), empty(FINDINGS))
        assert findings["category"].to_list() == ["CHECKPOINT_IO"], text
    assert classify_by_frames(_lines(tmp_path, RECOMPUTE_CUT), empty(FINDINGS)).is_empty()


# Light-Head R-CNN#37: a data worker reading a truncated annotation record (real lines).
DATASET_FUNCTION_TRACEBACK = """\
Process _Worker-8:
Traceback (most recent call last):
  File "/home/edgar/light_head_rcnn/experiments/lizeming/light_head_rcnn.ori_res101.coco.ps_roialign/dataset.py", line 96, in get_data_for_singlegpu
    record = json.loads(raw_line)
  File "/usr/lib/python3.6/json/decoder.py", line 355, in raw_decode
    obj, end = self.scan_once(s, idx)
json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 219 (char 218)
"""
# The same file's module level: an import that fails there is setup, not data.
DATASET_IMPORT_TRACEBACK = """\
Traceback (most recent call last):
  File "/home/user/project/dataset.py", line 3, in <module>
    import lmdb
ModuleNotFoundError: No module named 'lmdb'
"""


def test_an_exception_in_a_dataset_file_s_function_is_the_data_pipeline_but_not_its_imports(tmp_path):
    findings = classify_by_frames(_lines(tmp_path, DATASET_FUNCTION_TRACEBACK), empty(FINDINGS))
    assert findings.select("pattern", "category", "line").rows() == [("CTX002", "DATA_PIPELINE", 7)]
    assert classify_by_frames(_lines(tmp_path, DATASET_IMPORT_TRACEBACK), empty(FINDINGS)).is_empty()


# tensorflow#6493 (real lines, shortened): TensorFlow's Saver uploading a checkpoint to GCS.
TF_SAVER_TRACEBACK = """\
Traceback (most recent call last):
  File "/root/.local/lib/python2.7/site-packages/translate/translate.py", line 229, in train
    model.saver.save(sess, checkpoint_path, global_step=model.global_step)
  File "/usr/local/lib/python2.7/dist-packages/tensorflow/python/training/saver.py", line 1323, in save
    {self.saver_def.filename_tensor_name: checkpoint_file})
tensorflow.python.framework.errors_impl.UnavailableError: Unexpected response code 410 when resuming upload
"""
# nnU-Net#1797 (real frame, shortened): a worker of the package's dataloading/ folder, on Windows.
NNUNET_TRACEBACK = """\
Traceback (most recent call last):
  File "c:\\users\\user\\nnunet-wjcheon\\nnunetv2\\training\\dataloading\\utils.py", line 15, in _convert_to_npy
    np.save(npz_file[:-3] + "npy", a['data'])
zlib.error: Error -3 while decompressing data: invalid stored block lengths
"""


def test_tensorflow_s_saver_is_checkpoint_code_and_a_dataloading_folder_is_the_data_pipeline(tmp_path):
    saver = classify_by_frames(_lines(tmp_path, TF_SAVER_TRACEBACK), empty(FINDINGS))
    assert saver.select("pattern", "category").rows() == [("CTX001", "CHECKPOINT_IO")]
    loader = classify_by_frames(_lines(tmp_path, NNUNET_TRACEBACK), empty(FINDINGS))
    assert loader.select("pattern", "category").rows() == [("CTX002", "DATA_PIPELINE")]


# farizrahman4u/seq2seq#86 (real lines): Keras writing weights to an NFS mount that dropped.
KERAS_SAVE_WEIGHTS = """\
> Traceback (most recent call last):
  File "train.py", line 382, in <module>
    train_model(nn_model, w2v_model, tokenized_lines, index_to_token)
  File "train.py", line 355, in train_model
    save_model(nn_model)
  File "train.py", line 329, in save_model
    nn_model.save_weights(NN_MODEL_PATH, overwrite=True)
  File "/home/t/anaconda2/lib/python2.7/site-packages/keras/engine/topology.py", line 2315, in save_weights
    f = h5py.File(filepath, 'w')
  File "/home/t/anaconda2/lib/python2.7/site-packages/h5py/_hl/files.py", line 260, in __init__
    fid = make_fid(name, mode, userblock_size, fapl, swmr=swmr)
  File "/home/t/anaconda2/lib/python2.7/site-packages/h5py/_hl/files.py", line 95, in make_fid
    fid = h5f.create(name, h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl)
  File "h5py/_objects.pyx", line 54, in h5py._objects.with_phil.wrapper (/home/ilan/minonda/conda-bld/work/h5py/_objects.c:2579)
  File "h5py/_objects.pyx", line 55, in h5py._objects.with_phil.wrapper (/home/ilan/minonda/conda-bld/work/h5py/_objects.c:2538)
  File "h5py/h5f.pyx", line 96, in h5py.h5f.create (/home/ilan/minonda/conda-bld/work/h5py/h5f.c:1989)
IOError: Unable to create file (Unable to open file: name = 'models/_w300_l6_s16_b32_m1_d2', errno = 70, error message = 'communication error on send', flags = 13, o_flags = 242)
"""


def test_keras_save_weights_is_checkpoint_code(tmp_path):
    found = classify_by_frames(_lines(tmp_path, KERAS_SAVE_WEIGHTS), empty(FINDINGS))
    assert found.select("pattern", "category").rows() == [("CTX001", "CHECKPOINT_IO")]
    assert "in save_weights" in found["captures"][0] or "in save_model" in found["captures"][0]


# modelscope/ms-swift#4644 (blank lines as posted): Megatron's batch fetch finds the data iterator exhausted.
ITERATOR_RAN_OUT = """\
[rank24]: File "/home/user/.local/lib/python3.10/site-packages/swift/megatron/train/utils.py", line 213, in get_batch

[rank24]: batch = get_batch_on_this_tp_rank(data_iterator)

[rank24]: File "/home/user/.local/lib/python3.10/site-packages/swift/megatron/train/utils.py", line 60, in get_batch_on_this_tp_rank

[rank24]: data = next(data_iterator)

[rank24]: StopIteration
"""
# OpenNMT/OpenNMT-py#1454: the multi-GPU batch producer's queue is full.
PRODUCER_QUEUE_FULL = """\
  File "/workspace/OpenNMT-py/train.py", line 127, in batch_producer
    q.put(b, False)
  File "/opt/conda/envs/learn-dev/lib/python3.7/multiprocessing/queues.py", line 83, in put
    raise Full
queue.Full
"""


def test_exceptions_named_without_error_are_exception_lines_and_batch_fetching_frames_are_the_data_pipeline(tmp_path):
    ran_out = classify_by_frames(_lines(tmp_path, ITERATOR_RAN_OUT), empty(FINDINGS))
    assert ran_out.select("category", "line", "text").rows() == [("DATA_PIPELINE", 9, "[rank24]: StopIteration")]
    assert "in get_batch_on_this_tp_rank" in ran_out["captures"][0]
    full = classify_by_frames(_lines(tmp_path, PRODUCER_QUEUE_FULL), empty(FINDINGS))
    assert full.select("category", "line", "text").rows() == [("DATA_PIPELINE", 5, "queue.Full")]


# ruanchaves/transformers-lightning#41 (real lines): a log pasted as a markdown quote; its workers
# race to create the checkpoint folder in a ModelCheckpoint-style callback.
QUOTED_CALLBACK_TRACEBACK = """\
> Traceback (most recent call last):
>   File "main.py", line 89, in <module>
>     main(hparams)
>   File "main.py", line 24, in main
>     save_transformers_callback = callbacks.TransformersModelCheckpointCallback(hparams)
>   File "/m100/home/userexternal/ouryupin/nlp/lib/python3.8/site-packages/transformers_lightning/callbacks/transformers_model_checkpoint.py", line 27, in __init__
>     os.makedirs(self.destination)
>   File "/cineca/prod/opt/compilers/python/3.8.2/none/lib/python3.8/os.py", line 223, in makedirs
>     mkdir(name, mode)
> FileExistsError: [Errno 17] File exists: '***************************'
"""


def test_a_traceback_pasted_as_a_quote_is_one_block_ending_on_its_exception(tmp_path):
    lines = _lines(tmp_path, QUOTED_CALLBACK_TRACEBACK)
    assert lines["block"].n_unique() == 1
    found = classify_by_frames(lines, empty(FINDINGS))
    assert found.select("pattern", "category", "line").rows() == [("CTX001", "CHECKPOINT_IO", 10)]


# ray-project/ray#43803 (real lines): a Ray Data read task failed on S3 and ended the training run;
# the paste stops inside Ray Data's operators.
RAY_DATA_READ_FAILED = """\
Traceback (most recent call last):
ray.exceptions.RayTaskError(OSError): ray::ReadImage->Map(wnid_to_index)() (pid=257328, ip=10.0.34.58)
    for b_out in map_transformer.apply_transform(iter(blocks), ctx):
  File "/home/ubuntu/miniconda3/envs/ray-gpu/lib/python3.10/site-packages/ray/data/_internal/execution/operators/map_transformer.py", line 392, in __call__
    for data in iter:
  File "/home/ubuntu/miniconda3/envs/ray-gpu/lib/python3.10/site-packages/ray/data/_internal/execution/operators/map_transformer.py", line 134, in _udf_timed_iter
    output = next(input)
"""


def test_an_exception_raised_inside_ray_data_is_the_data_pipeline(tmp_path):
    found = classify_by_frames(_lines(tmp_path, RAY_DATA_READ_FAILED), empty(FINDINGS))
    assert found.select("pattern", "category").rows() == [("CTX002", "DATA_PIPELINE")]


# Lightning-AI/pytorch-lightning#19045 (real lines): ranks disagreed in ModelCheckpoint, so the
# checkpoint callback's barrier never completed; the paste stops inside the barrier.
BARRIER_IN_CHECKPOINT_CALLBACK = """\
  File "/opt/conda/envs/moleculearn2/lib/python3.8/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 377, in _save_checkpoint
    self._last_global_step_saved = trainer.global_step
  File "/opt/conda/envs/moleculearn2/lib/python3.8/site-packages/lightning/pytorch/trainer/trainer.py", line 1384, in save_checkpoint
    self.strategy.barrier("Trainer.save_checkpoint")
  File "/opt/conda/envs/moleculearn2/lib/python3.8/site-packages/lightning/pytorch/strategies/ddp.py", line 290, in barrier
    torch.distributed.barrier(device_ids=self.determine_ddp_device_ids())
  File "/opt/conda/envs/moleculearn2/lib/python3.8/site-packages/torch/distributed/c10d_logger.py", line 47, in wrapper
    return func(*args, **kwargs)
  File "/opt/conda/envs/moleculearn2/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier
"""


def test_the_innermost_subsystem_on_the_stack_decides_a_barrier_called_by_checkpoint_code_is_a_collective(tmp_path):
    found = classify_by_frames(_lines(tmp_path, BARRIER_IN_CHECKPOINT_CALLBACK), empty(FINDINGS))
    assert found.select("pattern", "category", "role").rows() == [("CTX006", "COLLECTIVE_TIMEOUT", "cascade")]
    # The same checkpoint frames with no collective under them stay checkpoint I/O.
    outer = "\n".join(BARRIER_IN_CHECKPOINT_CALLBACK.splitlines()[:4]) + "\n"
    assert classify_by_frames(_lines(tmp_path, outer), empty(FINDINGS))["category"].to_list() == ["CHECKPOINT_IO"]


# facebookresearch/habitat-lab#429 (real lines): the trainer's pipe to its environment worker
# breaks after the worker died of its own AttributeError.
WORKER_PIPE = """\
Traceback (most recent call last):
  File "/home/mukul/anaconda3/envs/habitat/lib/python3.6/multiprocessing/connection.py", line 368, in _send
    n = write(self._handle, buf)
BrokenPipeError: [Errno 32] Broken pipe
"""


def test_a_broken_pipe_to_a_local_worker_is_a_cascade_not_the_network(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text(WORKER_PIPE)
    analysis = analyze(tmp_path)
    pipe = analysis.incident.findings.filter(pl.col("line") == 4)
    assert pipe.select("pattern", "role").rows() == [("CTX009", "cascade")]
    assert analysis.verdict.category != "NETWORK"


# ultralytics/yolov5#8406 (real lines): a DataLoader finalizer failing at interpreter exit.
IGNORED_AT_EXIT = """\
Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f4972feac10>
Traceback (most recent call last):
  File "/home/wonchul/anaconda3/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1328, in __del__
  File "/home/wonchul/anaconda3/lib/python3.8/site-packages/torch/utils/data/dataloader.py", line 1262, in _shutdown_workers
AttributeError: 'NoneType' object has no attribute 'python_exit_status'
"""


def test_a_traceback_python_ignored_is_a_note_not_a_crash(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text(IGNORED_AT_EXIT)
    analysis = analyze(tmp_path)
    failing = analysis.incident.findings.filter(pl.col("severity").is_in(["error", "critical"]))
    assert failing.is_empty() and analysis.verdict.state != "crashed"
    # The same traceback without Python's "ignored" line ended the process.
    (tmp_path / "console.log").write_text(IGNORED_AT_EXIT.split("\n", 1)[1])
    assert analyze(tmp_path).verdict.state == "crashed"


# Real tracebacks of a checkpoint lacking the key the code reads: karpathy/llama2.c#148,
# maudzung/SFA3D#48, jfzhang95/pytorch-video-recognition#10, YBIGTA/pytorch-hair-segmentation#30.
MISSING_KEYS = [
    ["Traceback (most recent call last):", '  File "train.py", line 183, in <module>',
     '    optimizer.load_state_dict(checkpoint["optimizer"])', "KeyError: 'optimizer'"],
    ["Traceback (most recent call last):", '  File "train.py", line 281, in <module>', "    main()",
     '  File "train.py", line 67, in main', "    main_worker(configs.gpu_idx, configs)", '  File "train.py", line 132, in main_worker',
     "    optimizer.load_state_dict(utils_state_dict['optimizer'])", "KeyError: 'optimizer'"],
    ["Traceback (most recent call last):", '  File "inference.py", line 77, in <module>', "    main()",
     '  File "inference.py", line 32, in main', "    model.load_state_dict(checkpoint['state_dict'])", "KeyError: 'state_dict'"],
    ["Traceback (most recent call last):", '  File "E:/Project/hair_segmentation/evaluate.py", line 55, in <module>',
     "    net.load_state_dict(state['weight'])", "KeyError: 'weight'"],
]  # fmt: skip


def test_a_key_error_reading_a_loaded_checkpoint_is_checkpoint_io(incident):
    from forensics.flow import analyze

    for traceback in MISSING_KEYS:
        analysis = analyze(incident({"train.log": "\n".join(traceback) + "\n"}))
        assert analysis.incident.findings.select("pattern", "line").rows() == [("CTX010", len(traceback))], traceback
        assert analysis.verdict.category == "CHECKPOINT_IO"
    # The same exception looking up anything else says nothing about checkpoints.
    other = [*MISSING_KEYS[2][:4], "    label = class_names[predicted]", "KeyError: 'state_dict'"]
    assert analyze(incident({"train.log": "\n".join(other) + "\n"})).incident.findings["pattern"].to_list() == ["EXC001"]


# Real tracebacks of jwyang/faster-rcnn.pytorch#506 and ultralytics/yolov3#854, both
# resuming a checkpoint whose SGD momentum buffers have another shape than the parameters.
OPTIMIZER_STATE_MISMATCH = [
    ["Traceback (most recent call last):", '  File "trainval_net.py", line 355, in <module>', "    optimizer.step()",
     '  File "/usr/local/lib/python3.5/dist-packages/torch/optim/sgd.py", line 101, in step',
     "    buf.mul_(momentum).add_(1 - dampening, d_p)",
     "RuntimeError: The size of tensor a (512) must match the size of tensor b (18) at non-singleton dimension 0"],
    ["Traceback (most recent call last):", '  File "train.py", line 436, in <module>', "    train()  # train normally",
     '  File "train.py", line 295, in train', "    optimizer.step()",
     '  File "/home/thorpham/anaconda3/envs/thorpham/lib/python3.5/site-packages/torch/optim/sgd.py", line 100, in step',
     "    buf.mul_(momentum).add_(1 - dampening, d_p)",
     "RuntimeError: The size of tensor a (32) must match the size of tensor b (128) at non-singleton dimension 0"],
]  # fmt: skip


def test_a_shape_mismatch_in_the_optimizer_s_step_is_optimizer_state_from_a_checkpoint(incident):
    from forensics.flow import analyze

    for traceback in OPTIMIZER_STATE_MISMATCH:
        analysis = analyze(incident({"train.log": "\n".join(traceback) + "\n"}))
        assert analysis.incident.findings.select("pattern", "line").rows() == [("CTX011", len(traceback))]
        assert analysis.verdict.category == "CHECKPOINT_IO"
    # The same mismatch raised in the model's forward pass is no optimizer state.
    forward = [
        *OPTIMIZER_STATE_MISMATCH[1][:5],
        '  File "models.py", line 210, in forward',
        "    x = x + residual",
        OPTIMIZER_STATE_MISMATCH[1][-1],
    ]
    assert "CTX011" not in analyze(incident({"train.log": "\n".join(forward) + "\n"})).incident.findings["pattern"].to_list()


# modelscope/ms-swift#6695 (real lines): a datasets cache on NFS, on a Debian Python (`dist-packages`).
STALE_HANDLE_IN_DATASETS = """\
[rank1]:   File "/usr/local/lib/python3.10/dist-packages/datasets/arrow_dataset.py", line 4101, in _select_with_indices_mapping
[rank1]:     os.chmod(indices_cache_file_name, 0o666 & ~umask)
[rank1]: OSError: [Errno 116] Stale file handle: xxx
"""
# A missing data file read by a dataset's __getitem__ (the same errno as a missing checkpoint).
MISSING_FILE_IN_A_DATASET = """\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 52, in <listcomp>
    data = [self.dataset[idx] for idx in possibly_batched_index]
  File "/work/project/data/coco_dataset.py", line 88, in __getitem__
    with open(self.items[index]) as handle:
FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/checkpoints_annotations/000123.json'
"""


def test_a_file_errno_raised_while_reading_data_is_the_data_pipeline(tmp_path):
    from forensics.catalog import load_catalog
    from forensics.catalog.match import match_catalog
    from forensics.passes.traceback_context import demote_overridden

    for text, errno_pattern in ((STALE_HANDLE_IN_DATASETS, "CKPT010"), (MISSING_FILE_IN_A_DATASET, "CKPT015")):
        lines = _lines(tmp_path, text)
        generic = match_catalog(lines, load_catalog())
        assert errno_pattern in generic["pattern"].to_list()
        context = classify_by_frames(lines, generic)
        assert context["category"].to_list() == ["DATA_PIPELINE"]
        demoted = demote_overridden(generic, context, lines)
        assert demoted.filter(demoted["pattern"] == errno_pattern)["role"].to_list() == ["symptom"]


# MVA2025-SMOT4SB#1 (real lines): YOLOX's dataset package, a broken image read as None.
ASSERT_IN_A_DATASETS_PACKAGE = """\
Traceback (most recent call last):
  File "/repo/MVA2025-SMOT4SB/OC_SORT/yolox/data/datasets/mot.py", line 103, in pull_item
    assert img is not None
AssertionError
"""


def test_an_exception_in_a_project_s_datasets_package_is_the_data_pipeline(tmp_path):
    found = classify_by_frames(_lines(tmp_path, ASSERT_IN_A_DATASETS_PACKAGE), empty(FINDINGS))
    assert found.select("category", "line").rows() == [("DATA_PIPELINE", 4)]
    assert "datasets/mot.py" in found["captures"][0]
