/* Arbiter runner ABI: the C entry points every GPU lane's shared library exports.
 *
 * The including source defines, before #include "arb_runner.h":
 *   #define ARB_N_INPUTS n
 *   static const long long arb_input_elems[ARB_N_INPUTS];   elements per input
 *   static const long long arb_output_elems;
 *   static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,
 *                                hipStream_t stream);
 * Every input and the output are arrays of arb_store_t, the region's storage type (arb_gpu.h).
 * arb_launch enqueues the kernel(s) on `stream` without synchronizing and returns
 * hipGetLastError() (or the first failing call's code). Optionally, ARB_RELEASE_HOOK names a
 * `void f(void)` that arbiter_release calls to free what arb_launch allocated (a workspace).
 *
 * Every exported function returns 0 on success, else non-zero with a message available from
 * arbiter_last_error(). Every runtime call and every launch is checked. */
#ifndef ARB_RUNNER_H
#define ARB_RUNNER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arb_gpu.h"

#ifndef ARB_N_INPUTS
#error "define ARB_N_INPUTS, arb_input_elems, arb_output_elems and arb_launch before arb_runner.h"
#endif

static char arb_err[1024];
static int arb_n_sets = 0;
static arb_store_t* arb_dev_in[64 * ARB_N_INPUTS];
static arb_store_t* arb_dev_out = NULL;
static hipStream_t arb_stream = NULL;

static int arb_fail(const char* what, hipError_t e) {
    snprintf(arb_err, sizeof arb_err, "%s: %s (error %d)", what, hipGetErrorString(e), (int)e);
    return 1;
}

#define ARB_CHECK(call)                                   \
    do {                                                  \
        hipError_t arb_e_ = (call);                       \
        if (arb_e_ != hipSuccess) return arb_fail(#call, arb_e_); \
    } while (0)

/* An unwritten output element reads back as its storage type's poison (arbiter.check). */
__global__ void arb_poison_kernel(arb_store_t* p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
#if defined(ARB_STORE_F16) || defined(ARB_STORE_BF16)
    unsigned short bits = (unsigned short)ARB_POISON_STORE;
#else
    unsigned int bits = ARB_POISON_STORE;
#endif
    for (; i < n; i += stride) memcpy(&p[i], &bits, sizeof bits);
}

static hipError_t arb_launch_checked(int set) {
    hipError_t e = arb_launch((const arb_store_t* const*)&arb_dev_in[set * ARB_N_INPUTS],
                              arb_dev_out, arb_stream);
    hipError_t last = hipGetLastError();
    return e != hipSuccess ? e : last;
}

extern "C" {

const char* arbiter_last_error(void) { return arb_err; }

int arbiter_n_inputs(void) { return ARB_N_INPUTS; }

long long arbiter_input_elems(int i) {
    return (i >= 0 && i < ARB_N_INPUTS) ? arb_input_elems[i] : -1;
}

long long arbiter_output_elems(void) { return arb_output_elems; }

int arbiter_elem_bytes(void) { return (int)sizeof(arb_store_t); }

void arbiter_release(void) {
    for (int k = 0; k < arb_n_sets * ARB_N_INPUTS; ++k) {
        if (arb_dev_in[k]) (void)hipFree(arb_dev_in[k]);
        arb_dev_in[k] = NULL;
    }
    if (arb_dev_out) (void)hipFree(arb_dev_out);
    arb_dev_out = NULL;
    if (arb_stream) (void)hipStreamDestroy(arb_stream);
    arb_stream = NULL;
    arb_n_sets = 0;
#ifdef ARB_RELEASE_HOOK
    ARB_RELEASE_HOOK(); /* a lane's own device allocations (workspace), freed with the rest */
#endif
}

/* Allocate n_sets copies of every input (host_inputs[set * ARB_N_INPUTS + i]) and one output
 * on the device, and copy the inputs in once. Replaces whatever was prepared before. */
int arbiter_prepare(int n_sets, const void* const* host_inputs) {
    arbiter_release();
    arb_err[0] = '\0';
    if (n_sets < 1 || n_sets > 64 || host_inputs == NULL) {
        snprintf(arb_err, sizeof arb_err, "arbiter_prepare: need 1..64 input sets, got %d", n_sets);
        return 1;
    }
    for (int k = 0; k < n_sets * ARB_N_INPUTS; ++k) {
        if (host_inputs[k] == NULL) {
            snprintf(arb_err, sizeof arb_err, "arbiter_prepare: input %d of set %d is NULL",
                     k % ARB_N_INPUTS, k / ARB_N_INPUTS);
            return 1;
        }
    }
    ARB_CHECK(hipStreamCreate(&arb_stream));
    arb_n_sets = n_sets;
    for (int k = 0; k < n_sets * ARB_N_INPUTS; ++k) {
        size_t bytes = (size_t)arb_input_elems[k % ARB_N_INPUTS] * sizeof(arb_store_t);
        ARB_CHECK(hipMalloc((void**)&arb_dev_in[k], bytes));
        ARB_CHECK(hipMemcpy(arb_dev_in[k], host_inputs[k], bytes, hipMemcpyHostToDevice));
    }
    ARB_CHECK(hipMalloc((void**)&arb_dev_out, (size_t)arb_output_elems * sizeof(arb_store_t)));
    return 0;
}

/* Poison the output, launch on input set `set`, synchronize, copy the output to host_out. */
int arbiter_run(int set, void* host_out) {
    if (arb_n_sets == 0 || set < 0 || set >= arb_n_sets || host_out == NULL) {
        snprintf(arb_err, sizeof arb_err, "arbiter_run: set %d not prepared (have %d)", set,
                 arb_n_sets);
        return 1;
    }
    arb_poison_kernel<<<1024, 256, 0, arb_stream>>>(arb_dev_out, arb_output_elems);
    ARB_CHECK(hipGetLastError());
    ARB_CHECK(arb_launch_checked(set));
    ARB_CHECK(hipStreamSynchronize(arb_stream));
    ARB_CHECK(hipMemcpy(host_out, arb_dev_out, (size_t)arb_output_elems * sizeof(arb_store_t),
                        hipMemcpyDeviceToHost));
    return 0;
}

/* Copy input `k` of set `set` back from the device into host_in (its element count): the
 * runner compares it with what it copied in, so a kernel that writes into its inputs (in
 * place, or out of bounds) is caught. */
int arbiter_read_input(int set, int k, void* host_in) {
    if (arb_n_sets == 0 || set < 0 || set >= arb_n_sets || k < 0 || k >= ARB_N_INPUTS ||
        host_in == NULL) {
        snprintf(arb_err, sizeof arb_err, "arbiter_read_input: input %d of set %d not prepared",
                 k, set);
        return 1;
    }
    ARB_CHECK(hipStreamSynchronize(arb_stream));
    ARB_CHECK(hipMemcpy(host_in, arb_dev_in[set * ARB_N_INPUTS + k],
                        (size_t)arb_input_elems[k] * sizeof(arb_store_t), hipMemcpyDeviceToHost));
    return 0;
}

/* `warmup` untimed launches, then `repeats` launches back to back with a device event between
 * each; ms_out[r] is the time between consecutive events. Input sets rotate per launch. */
int arbiter_time(int warmup, int repeats, float* ms_out) {
    if (arb_n_sets == 0 || repeats < 1 || warmup < 0 || ms_out == NULL) {
        snprintf(arb_err, sizeof arb_err, "arbiter_time: not prepared or bad counts");
        return 1;
    }
    for (int i = 0; i < warmup; ++i) ARB_CHECK(arb_launch_checked(i % arb_n_sets));
    hipEvent_t* ev = (hipEvent_t*)calloc((size_t)repeats + 1, sizeof(hipEvent_t));
    if (ev == NULL) {
        snprintf(arb_err, sizeof arb_err, "arbiter_time: out of host memory");
        return 1;
    }
    int rc = 0, made = 0;
    hipError_t e = hipSuccess;
    for (; made <= repeats && e == hipSuccess; ++made) e = hipEventCreate(&ev[made]);
    if (e != hipSuccess) { rc = arb_fail("hipEventCreate", e); made--; goto done; }
    if ((e = hipEventRecord(ev[0], arb_stream)) != hipSuccess) { rc = arb_fail("hipEventRecord", e); goto done; }
    for (int r = 0; r < repeats; ++r) {
        if ((e = arb_launch_checked((warmup + r) % arb_n_sets)) != hipSuccess) { rc = arb_fail("launch", e); goto done; }
        if ((e = hipEventRecord(ev[r + 1], arb_stream)) != hipSuccess) { rc = arb_fail("hipEventRecord", e); goto done; }
    }
    if ((e = hipEventSynchronize(ev[repeats])) != hipSuccess) { rc = arb_fail("hipEventSynchronize", e); goto done; }
    for (int r = 0; r < repeats; ++r) {
        if ((e = hipEventElapsedTime(&ms_out[r], ev[r], ev[r + 1])) != hipSuccess) {
            rc = arb_fail("hipEventElapsedTime", e);
            goto done;
        }
    }
done:
    for (int k = 0; k < made; ++k) (void)hipEventDestroy(ev[k]);
    free(ev);
    return rc;
}

} /* extern "C" */

#endif /* ARB_RUNNER_H */
