"""Stand-ins for the libdevice functions generated kernels call, for Triton's CPU interpreter.

The interpreter (Triton 3.9) runs no libdevice, so kernels run there bind the
name ``libdevice`` to this module instead. Each function is written with
Triton's core operations, accurate to float32 rounding for the inputs tests
use; kernels compiled for GPUs call the real libdevice.
"""
import triton
import triton.language as tl


@triton.jit
def tanh(x):
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def sinh(x):
    return 0.5 * (tl.exp(x) - tl.exp(-x))


@triton.jit
def cosh(x):
    return 0.5 * (tl.exp(x) + tl.exp(-x))


@triton.jit
def asinh(x):
    ax = tl.abs(x)
    y = tl.log(ax + tl.sqrt(ax * ax + 1.0))
    return tl.where(x < 0, -y, y)


@triton.jit
def acosh(x):
    return tl.log(x + tl.sqrt(x * x - 1.0))


@triton.jit
def atanh(x):
    return 0.5 * tl.log((1.0 + x) / (1.0 - x))


@triton.jit
def expm1(x):
    return tl.where(tl.abs(x) < 1e-5, x + 0.5 * x * x, tl.exp(x) - 1.0)


@triton.jit
def log1p(x):
    u = 1.0 + x
    # log(u) * x / (u - 1) corrects the rounding of 1 + x
    return tl.where(u == 1.0, x, tl.log(u) * x / (u - 1.0))


@triton.jit
def log10(x):
    return tl.log(x) * 0.4342944819032518


@triton.jit
def trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def nearbyint(x):
    # round half to even
    r = tl.floor(x + 0.5)
    tie = (r - x) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def tan(x):
    return tl.sin(x) / tl.cos(x)


@triton.jit
def atan(x):
    # range reduction to |t| <= tan(pi/12), then an odd polynomial
    ax = tl.abs(x)
    inv = ax > 1.0
    t = tl.where(inv, 1.0 / tl.maximum(ax, 1e-30), ax)
    shift = t > 0.2679491924311227
    t = tl.where(shift, (t - 0.5773502691896258) / (1.0 + 0.5773502691896258 * t), t)
    t2 = t * t
    p = t * (1.0 - t2 * (0.3333333333 - t2 * (0.2 - t2 * (0.1428571429 - t2 * 0.1111111111))))
    p = tl.where(shift, p + 0.5235987755982988, p)
    p = tl.where(inv, 1.5707963267948966 - p, p)
    return tl.where(x < 0, -p, p)


@triton.jit
def asin(x):
    return atan(x / tl.sqrt(1.0 - x * x))


@triton.jit
def acos(x):
    return 1.5707963267948966 - atan(x / tl.sqrt(1.0 - x * x))


@triton.jit
def atan2(y, x):
    base = atan(y / x)
    pi = 3.141592653589793
    return tl.where(x > 0, base, tl.where(x < 0, tl.where(y >= 0, base + pi, base - pi),
                                          tl.where(y > 0, pi / 2, tl.where(y < 0, -pi / 2, 0.0))))


@triton.jit
def pow(x, y):
    mag = tl.exp(y * tl.log(tl.abs(x)))
    # negative bases: defined for integral exponents, odd ones flip the sign
    odd = (y - 2.0 * tl.floor(y * 0.5)) == 1.0
    integral = tl.floor(y) == y
    neg = tl.where(integral, tl.where(odd, -mag, mag), float("nan"))
    return tl.where(x < 0, neg, tl.where(x == 0, tl.where(y == 0, 1.0, tl.where(y > 0, 0.0, float("inf"))), mag))


@triton.jit
def hypot(x, y):
    return tl.sqrt(x * x + y * y)


@triton.jit
def copysign(x, y):
    return tl.where(y < 0, -tl.abs(x), tl.abs(x))


@triton.jit
def fmod(x, y):
    q = x / y
    return x - y * tl.where(q < 0, tl.ceil(q), tl.floor(q))


@triton.jit
def signbit(x):
    return x < 0
