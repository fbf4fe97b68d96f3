"""Lowering of a ``PARALLEL`` loop to libgomp: outline the body, run it on a team of threads.

The caller packs the body's free loop variables and buffer pointers into 8-byte slots and
calls ``GOMP_parallel(outlined, slots, nthreads, 0)``. ``outlined`` runs a static contiguous
chunk of the iterations by calling an always-inlined body function whose pointer parameters
are ``noalias``, so the optimizer keeps the aliasing facts the kernel's arguments had.
"""
from __future__ import annotations

from autotune.codegen.llvm.emit import Env, FunctionEmitter
from autotune.codegen.llvm.index import free_names
from autotune.codegen.llvm.text import I32, I64, PTR, FunctionBuilder, Val, const_int
from autotune.ir.stmt import For


def emit_parallel(em: FunctionEmitter, loop: For) -> bool:
    """Emit ``loop`` as a libgomp parallel region; False when one thread would run it all."""
    extent = loop.extent
    nthreads = min(int(em.target.cores), extent)
    if nthreads < 2:
        return False
    vars_, used = free_names(loop)
    # keep the kernel's argument order: captured pointers then read like the signature
    bufs = [b for b in em.env.bufs if b in used] + [b for b in used if b not in em.env.bufs]
    captured = [em.buffer_ptr(b) for b in bufs] + [em.expr(v) for v in vars_]
    module = em.module
    name = module.unique_name(f"{em.fb.name}.par_{loop.var.name}")

    # 1. the body over [lo, hi), with noalias/aligned pointers like the kernel's own
    params = ([(PTR, "noalias align 64", b.name) for b in bufs]
              + [(I64, "", v.name) for v in vars_] + [(I64, "", "lo"), (I64, "", "hi")])
    body_fb = module.function(name + ".body", params, linkage="internal", inline=True)
    n = len(bufs)
    env = Env(vars={v: body_fb.params[n + i] for i, v in enumerate(vars_)},
              ranges={v: em.env.ranges[v] for v in vars_ if v in em.env.ranges},
              bufs={b: body_fb.params[i] for i, b in enumerate(bufs)},
              in_parallel=True)
    sub = em.spawn(body_fb, env)
    lo, hi = body_fb.params[-2:]
    sub.serial_loop(loop.var, lo, hi, (0, extent - 1), lambda: sub.visit(loop.body),
                    nonempty=False)

    # 2. the outlined function libgomp calls on every thread of the team
    fb = module.function(name, [(PTR, "", "data")], linkage="internal")
    data = fb.params[0]
    args = []
    for i, c in enumerate(captured):
        slot = fb.emit(PTR, f"getelementptr inbounds i64, {data}, i64 {i}", "slot")
        args.append(fb.emit(c.ty, f"load {c.ty}, {slot}, align 8", "cap"))
    tid_fn = module.declare("omp_get_thread_num", "declare i32 @omp_get_thread_num()")
    nt_fn = module.declare("omp_get_num_threads", "declare i32 @omp_get_num_threads()")
    tid = fb.emit(I64, f"zext {fb.emit(I32, f'call i32 {tid_fn}()')} to i64")
    nt = fb.emit(I64, f"zext {fb.emit(I32, f'call i32 {nt_fn}()')} to i64")
    total = const_int(extent)
    chunk = fb.emit(I64, f"udiv {fb.emit(I64, f'add i64 {nt.ref}, {extent - 1}')}, {nt.ref}")
    start = _umin(fb, fb.emit(I64, f"mul i64 {tid.ref}, {chunk.ref}"), total)
    stop = _umin(fb, fb.emit(I64, f"add i64 {start.ref}, {chunk.ref}"), total)
    call_args = ", ".join(str(a) for a in [*args, start, stop])
    fb.do(f"call void @{body_fb.name}({call_args})")

    # 3. in the caller: pack the captures and start the team (returns when all finished)
    slots = em.fb.alloca(f"[{max(len(captured), 1)} x i64]", 8, "par.data")
    for i, c in enumerate(captured):
        slot = em.fb.emit(PTR, f"getelementptr inbounds i64, {slots}, i64 {i}", "slot")
        em.fb.do(f"store {c}, {slot}, align 8")
    gomp = module.declare("GOMP_parallel", "declare void @GOMP_parallel(ptr, ptr, i32, i32)")
    em.fb.do(f"call void {gomp}(ptr @{name}, {slots}, i32 {nthreads}, i32 0)")
    return True


def _umin(fb: FunctionBuilder, a: Val, b: Val) -> Val:
    c = fb.emit("i1", f"icmp ult {a}, {b.ref}")
    return fb.emit(a.ty, f"select i1 {c.ref}, {a}, {b}")
