"""``torch_xla.core.xla_env_vars`` (``xenv``): the names of torch_xla's environment
variables, as constants whose value is the variable's name.

Contract: each constant equals its own name (``xenv.PJRT_DEVICE == "PJRT_DEVICE"``), so
code that reads ``os.environ[xenv.X]`` reads the variable torch_xla's documentation
names. Which of them lazax honours, maps or ignores: ``torch_xla._env`` and
docs/torch_xla.md.
"""

_NAMES = (
    "ACCELERATOR_TYPE",
    "CLOUD_TPU_TASK_ID",
    "CPU_NUM_DEVICES",
    "GPU_NUM_DEVICES",
    "HOST_ORDINAL",
    "LOCAL_ORDINAL",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "ORDINAL",
    "PJRT_CPU_ASYNC_CLIENT",
    "PJRT_DEVICE",
    "PJRT_DIST_SERVICE_ADDR",
    "PJRT_GPU_ASYNC_CLIENT",
    "PJRT_SELECT_DEFAULT_DEVICE",
    "RANK",
    "TPU_ACCELERATOR_TYPE",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_HOST_BOUNDS",
    "TPU_NUM_DEVICES",
    "TPU_PROCESS_ADDRESSES",
    "TPU_PROCESS_BOUNDS",
    "TPU_PROCESS_PORT",
    "TPU_SKIP_MDS_QUERY",
    "TPU_VISIBLE_CHIPS",
    "TPU_WORKER_ID",
    "WORKER_ID",
    "WORLD_SIZE",
    "XLA_USE_SPMD",
)

globals().update({name: name for name in _NAMES})

__all__ = list(_NAMES)
