atol = 1e-6
rtol = 1e-6


def buffers(N):
    return {
        "x": {"shape": (N,), "dtype": "float32", "role": "input"},
        "y": {"shape": (N,), "dtype": "float32", "role": "inout"},
    }


def reference(x, y, N):
    y += 2.0 * x


def workload_model(N):
    return {"flops": 2 * N, "bytes_min": 12 * N}
