// The CPU emulation of CUDA used by the emulated kernel tests (see
// kvlab_cuda_emu.h). Single-threaded: CUDA threads are fibers run round-robin
// by RunGrid; a thread blocked at a barrier yields until it opens. On x86-64
// fibers switch with a few instructions (callee-saved registers and the stack
// pointer); elsewhere with ucontext, which makes a system call per switch.
#include "kernels/cuda/emu/kvlab_cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#if defined(__x86_64__)
// kvlab_emu_switch(save, to): saves the callee-saved registers on the current
// stack, stores the stack pointer in *save, and resumes the stack `to`.
extern "C" void kvlab_emu_switch(void** save, void* to);
asm(R"(
  .text
  .p2align 4
  .globl kvlab_emu_switch
  .type kvlab_emu_switch, @function
kvlab_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kvlab_emu_switch, .-kvlab_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#define KVLAB_EMU_FAST_SWITCH 1
#endif

namespace kvlab_emu {
namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr size_t kDefaultSmemLimit = 48 * 1024;
constexpr size_t kOptinSmemLimit = 227 * 1024;
constexpr int kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xa5;

struct Barrier {
  int expected = 0;
  int count = 0;
  long generation = 0;
};

struct Fiber {
#ifdef KVLAB_EMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  char* stack = nullptr;
  dim3 tid;
  int warp = 0;
  bool done = false;
};

struct Warp {
  Barrier barrier;
  uint32_t slot[32] = {};
  uint32_t mma[32][6] = {};  // MmaM16N8K16: each lane's A (4) and B (2) registers
  bool full = true;
};

struct Cta {
  dim3 block_idx, block_dim, grid_dim;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier block_barrier;
  std::vector<uint8_t> smem;  // smem_bytes + canary
  const std::function<void()>* body = nullptr;
  long events = 0;  // barrier arrivals and finished threads: progress
  std::string error;
};

#ifdef KVLAB_EMU_FAST_SWITCH
void* g_scheduler_sp = nullptr;
#else
ucontext_t g_scheduler;
#endif
std::vector<std::unique_ptr<char[]>> g_stacks;  // reused by every CTA
Cta* g_cta = nullptr;
Fiber* g_current = nullptr;
cudaError_t g_sticky = cudaSuccess;
std::map<const void*, size_t> g_smem_limit;

struct Allocation {
  void* map_base;
  size_t map_bytes;
};
std::map<void*, Allocation> g_allocations;

void Yield() {
#ifdef KVLAB_EMU_FAST_SWITCH
  kvlab_emu_switch(&g_current->sp, g_scheduler_sp);
#else
  swapcontext(&g_current->ctx, &g_scheduler);
#endif
}

// Runs fiber f until it yields or finishes.
void Resume(Fiber* f) {
  g_current = f;
#ifdef KVLAB_EMU_FAST_SWITCH
  kvlab_emu_switch(&g_scheduler_sp, f->sp);
#else
  swapcontext(&g_scheduler, &f->ctx);
#endif
}

void Wait(Barrier* b) {
  const long gen = b->generation;
  ++g_cta->events;
  if (++b->count == b->expected) {
    b->count = 0;
    ++b->generation;
    return;
  }
  while (b->generation == gen) Yield();
}

void FiberEntry(int index) {
  g_current = &g_cta->fibers[static_cast<size_t>(index)];
  (*g_cta->body)();
  g_current->done = true;
  ++g_cta->events;
#ifdef KVLAB_EMU_FAST_SWITCH
  kvlab_emu_switch(&g_current->sp, g_scheduler_sp);  // never resumed
  std::abort();
#endif
}  // ucontext: returns to uc_link, the scheduler

#ifdef KVLAB_EMU_FAST_SWITCH
int g_entry_index = 0;
void FastEntry() { FiberEntry(g_entry_index); }

// A stack whose first resume "returns" into FastEntry with the ABI's
// alignment (rsp + 8 a multiple of 16 at function entry).
void PrepareFast(Fiber* f, int index) {
  uintptr_t top = reinterpret_cast<uintptr_t>(f->stack + kStackBytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;  // FastEntry's (never used) return address slot: rsp + 8 aligned at entry
  *--sp = reinterpret_cast<void*>(&FastEntry);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  f->sp = sp;
  (void)index;
}
#endif

size_t SmemLimit(const void* func) {
  const auto it = g_smem_limit.find(func);
  return it == g_smem_limit.end() ? kDefaultSmemLimit : it->second;
}

}  // namespace

const dim3& ThreadIdx() { return g_current->tid; }
const dim3& BlockIdx() { return g_cta->block_idx; }
const dim3& BlockDim() { return g_cta->block_dim; }
const dim3& GridDim() { return g_cta->grid_dim; }
uint8_t* DynamicSmem() { return g_cta->smem.data(); }

void SyncThreads() { Wait(&g_cta->block_barrier); }

uint32_t ShflXor(uint32_t v, int lane_mask) {
  Warp& w = g_cta->warps[static_cast<size_t>(g_current->warp)];
  if (!w.full && g_cta->error.empty()) g_cta->error = "warp shuffle in a partial warp (block size not a multiple of 32)";
  const int lane = static_cast<int>(g_current->tid.x % 32);
  w.slot[lane] = v;
  Wait(&w.barrier);
  const uint32_t r = w.slot[(lane ^ lane_mask) & 31];
  Wait(&w.barrier);
  return r;
}

void MmaM16N8K16(const uint32_t (&a)[4], const uint32_t (&b)[2], float (&c)[4], bool bf16) {
  Warp& w = g_cta->warps[static_cast<size_t>(g_current->warp)];
  if (!w.full && g_cta->error.empty()) g_cta->error = "mma in a partial warp (block size not a multiple of 32)";
  const int lane = static_cast<int>(g_current->tid.x % 32);
  for (int r = 0; r < 4; ++r) w.mma[lane][r] = a[r];
  for (int r = 0; r < 2; ++r) w.mma[lane][4 + r] = b[r];
  Wait(&w.barrier);
  auto value = [bf16](uint32_t reg, int high) {
    const uint16_t bits = static_cast<uint16_t>(high != 0 ? reg >> 16 : reg & 0xffffu);
    return bf16 ? kvlab::BF16ToF32(bits) : kvlab::F16ToF32(bits);
  };
  // PTX's m16n8k16 fragments (groupID = lane / 4, t = lane % 4): A reg r of
  // lane (g, t) holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) + {0, 1};
  // B reg r holds rows 2t + 8 r + {0, 1} of column g; C element i is row
  // g + 8 (i >> 1), column 2t + (i & 1).
  auto A = [&](int row, int col) {
    const int src = (row & 7) * 4 + ((col & 7) >> 1);
    return value(w.mma[src][(row >> 3) + 2 * (col >> 3)], col & 1);
  };
  auto B = [&](int k, int n) { return value(w.mma[n * 4 + ((k & 7) >> 1)][4 + (k >> 3)], k & 1); };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc = std::fma(A(row, k), B(k, col), acc);
    out[i] = acc;
  }
  Wait(&w.barrier);  // every lane has read the registers before any writes new ones
  for (int i = 0; i < 4; ++i) c[i] = out[i];
}

cudaError_t RunGrid(const void* func, dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (block.y != 1 || block.z != 1 || threads <= 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    std::fprintf(stderr, "kvlab_emu: bad launch configuration (%u x %u x %u threads)\n", block.x, block.y, block.z);
    return g_sticky = cudaErrorInvalidConfiguration;
  }
  if (smem_bytes > SmemLimit(func)) {
    std::fprintf(stderr, "kvlab_emu: %zu bytes of dynamic shared memory exceed the kernel's limit %zu\n", smem_bytes,
                 SmemLimit(func));
    return g_sticky = cudaErrorInvalidValue;
  }
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Cta cta;
        cta.block_idx = dim3(bx, by, bz);
        cta.block_dim = block;
        cta.grid_dim = grid;
        cta.body = &body;
        cta.block_barrier.expected = threads;
        cta.smem.assign(smem_bytes + kCanaryBytes, kCanary);
        std::memset(cta.smem.data(), 0x7f, smem_bytes);  // stale garbage (NaN-ish floats), not zeros
        const int num_warps = (threads + 31) / 32;
        cta.warps.resize(static_cast<size_t>(num_warps));
        for (int w = 0; w < num_warps; ++w) {
          const int n = std::min(32, threads - 32 * w);
          cta.warps[static_cast<size_t>(w)].barrier.expected = n;
          cta.warps[static_cast<size_t>(w)].full = n == 32;
        }
        cta.fibers.resize(static_cast<size_t>(threads));
        while (g_stacks.size() < static_cast<size_t>(threads)) g_stacks.emplace_back(new char[kStackBytes]);
        g_cta = &cta;
        for (int t = 0; t < threads; ++t) {
          Fiber& f = cta.fibers[static_cast<size_t>(t)];
          f.tid = dim3(static_cast<unsigned>(t), 0, 0);
          f.warp = t / 32;
          f.stack = g_stacks[static_cast<size_t>(t)].get();
#ifdef KVLAB_EMU_FAST_SWITCH
          PrepareFast(&f, t);
#else
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack;
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = &g_scheduler;
          makecontext(&f.ctx, reinterpret_cast<void (*)()>(&FiberEntry), 1, t);
#endif
        }
        int remaining = threads;
        while (remaining > 0) {
          const long before = cta.events;
          for (int t = 0; t < threads; ++t) {
            Fiber& f = cta.fibers[static_cast<size_t>(t)];
            if (f.done) continue;
#ifdef KVLAB_EMU_FAST_SWITCH
            g_entry_index = t;  // read by FastEntry on the fiber's first resume
#endif
            Resume(&f);
            if (f.done) --remaining;
          }
          if (remaining > 0 && cta.events == before) {
            std::fprintf(stderr,
                         "kvlab_emu: deadlock in CTA (%u, %u, %u): %d threads wait at a barrier that the others "
                         "never reach\n",
                         bx, by, bz, remaining);
            g_cta = nullptr;
            return g_sticky = cudaErrorLaunchFailure;
          }
        }
        for (int i = 0; i < kCanaryBytes; ++i) {
          if (cta.smem[smem_bytes + static_cast<size_t>(i)] != kCanary) {
            cta.error = "shared memory written past the launch's " + std::to_string(smem_bytes) + " bytes";
            break;
          }
        }
        g_cta = nullptr;
        if (!cta.error.empty()) {
          std::fprintf(stderr, "kvlab_emu: CTA (%u, %u, %u): %s\n", bx, by, bz, cta.error.c_str());
          return g_sticky = cudaErrorLaunchFailure;
        }
      }
    }
  }
  return cudaSuccess;
}

}  // namespace kvlab_emu

using kvlab_emu::g_allocations;
using kvlab_emu::g_sticky;

// Streams and events: opaque heap objects whose only state is being alive.
struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  unsigned flags;
};
namespace kvlab_emu {
namespace {
std::set<const CUstream_st*> g_streams;
std::set<const CUevent_st*> g_events;
std::map<void*, size_t> g_host_allocations;
bool ValidStream(cudaStream_t s) { return s == nullptr || g_streams.count(s) != 0; }  // nullptr: the default stream
bool ValidEvent(cudaEvent_t e) { return e != nullptr && g_events.count(e) != 0; }
}  // namespace
}  // namespace kvlab_emu

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int /*dev*/) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;  // an H100 / H200
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(kvlab_emu::kOptinSmemLimit); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

// Each allocation ends right before a PROT_NONE page (its size rounded up to
// 256 bytes, the alignment cudaMalloc guarantees).
cudaError_t cudaMalloc(void** p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  const size_t data_pages = (rounded + page - 1) / page;
  const size_t map_bytes = (data_pages + 1) * page;
  void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return g_sticky = cudaErrorMemoryAllocation;
  uint8_t* guard = static_cast<uint8_t*>(base) + data_pages * page;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    munmap(base, map_bytes);
    return g_sticky = cudaErrorMemoryAllocation;
  }
  *p = guard - rounded;
  g_allocations[*p] = {base, map_bytes};
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (kvlab_emu::g_host_allocations.count(p) != 0) return cudaErrorInvalidValue;  // cudaFreeHost's
  const auto it = g_allocations.find(p);
  if (it == g_allocations.end()) return cudaErrorInvalidValue;
  munmap(it->second.map_base, it->second.map_bytes);
  g_allocations.erase(it);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind /*kind*/) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!kvlab_emu::ValidStream(stream)) return cudaErrorInvalidResourceHandle;
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes > 0) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t /*stream*/) {
  return cudaMemset(p, value, bytes);
}
cudaError_t cudaDeviceSynchronize() { return g_sticky; }

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!kvlab_emu::ValidStream(stream)) return cudaErrorInvalidResourceHandle;
  return g_sticky;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
  *stream = new CUstream_st{flags};
  kvlab_emu::g_streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || kvlab_emu::g_streams.erase(stream) == 0) return cudaErrorInvalidResourceHandle;
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (!kvlab_emu::ValidStream(stream) || !kvlab_emu::ValidEvent(event)) return cudaErrorInvalidResourceHandle;
  return flags == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~static_cast<unsigned>(cudaEventDisableTiming)) != 0) return cudaErrorInvalidValue;
  *event = new CUevent_st{flags};
  kvlab_emu::g_events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr || kvlab_emu::g_events.erase(event) == 0) return cudaErrorInvalidResourceHandle;
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!kvlab_emu::ValidStream(stream) || !kvlab_emu::ValidEvent(event)) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return kvlab_emu::ValidEvent(event) ? g_sticky : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return kvlab_emu::ValidEvent(event) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags) {
  if (p == nullptr || flags != cudaHostAllocDefault) return cudaErrorInvalidValue;
  const cudaError_t err = cudaMalloc(p, bytes);  // with its guard page
  if (err == cudaSuccess) kvlab_emu::g_host_allocations[*p] = bytes;
  return err;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (kvlab_emu::g_host_allocations.erase(p) == 0) return cudaErrorInvalidValue;
  return cudaFree(p);
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_sticky;
  g_sticky = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_sticky; }
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error (emulated)";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulated)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (emulated)";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated)";
    case cudaErrorNotSupported: return "operation not supported (emulated)";
  }
  return "unknown error (emulated)";
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kvlab_emu::kOptinSmemLimit) {
    return g_sticky = cudaErrorInvalidValue;
  }
  kvlab_emu::g_smem_limit[func] = static_cast<size_t>(value);
  return cudaSuccess;
}
cudaError_t EmuOccupancy(int* num_blocks, const void* /*func*/, int block_size, size_t smem_bytes) {
  // An H200-like SM: 2048 threads, 228 KB of shared memory; registers ignored.
  int n = 2048 / std::max(1, block_size);
  if (smem_bytes > 0) n = std::min<int>(n, static_cast<int>((228 * 1024) / (smem_bytes + 1024)));
  *num_blocks = std::max(0, std::min(n, 32));
  return cudaSuccess;
}
