"""kernel/resources.py's ptxas-report parser on both forms the DSL prints (plain, and
wrapped inside a spill remark). kernel.resources imports the DSL only in its workers."""

from decode_topk.kernel.resources import launch_config, parse_ptxas

PLAIN = """\x1b[96mremark[ptxas info]:\x1b[0m ptxas output: ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kernel_a' for 'sm_90a'
ptxas info    : Function properties for kernel_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
"""

WRAPPED = """  \x1b[96mremark:\x1b[0m Spilled values are placed in local memory and can add memory traffic. ptxas
          ptxas output:
          ptxas info    : 0 bytes gmem
          ptxas info    : Compiling entry function
          'kernel_b'
          for 'sm_90a'
          ptxas info    : Function properties for
          kernel_b
          ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
          ptxas info    : Used 64 registers, used 1 barriers, 8 bytes cumulative stack size
"""

IR = """
    %9 = llvm.mlir.constant(512 : i32) : i32
    %8 = llvm.mlir.constant(1 : i32) : i32
    %10 = llvm.mlir.constant(138576 : i64) : i64
    %16 = llvm.getelementptr %13[0, 1, 0] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>
    llvm.store %9, %16 : i32, !llvm.ptr
    %17 = llvm.getelementptr %13[0, 1, 1] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>
    llvm.store %8, %17 : i32, !llvm.ptr
    %19 = llvm.getelementptr %13[0, 2] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>
    llvm.store %10, %19 : i64, !llvm.ptr
    %112 = llvm.call @_cudaLaunchKernelEx(%94, %111, %97) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
"""


def test_plain_and_wrapped_reports():
    assert parse_ptxas(PLAIN) == {"kernel_a": {"stack_frame": 0, "spill_stores": 0, "spill_loads": 0, "regs": 10}}
    assert parse_ptxas(WRAPPED) == {"kernel_b": {"stack_frame": 8, "spill_stores": 4, "spill_loads": 4, "regs": 64}}


def test_launch_config_from_host_ir():
    cfg = launch_config(IR)
    assert cfg["smem"] == 138576 and cfg["block"][:2] == [512, 1] and cfg["launches"] == 1
