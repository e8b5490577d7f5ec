"""Writes the .npy fixtures read by tests/core/npy_test.cc (run from this folder; needs numpy and
ml_dtypes). The files are checked in, so the tests need neither."""
import numpy as np
import ml_dtypes

np.save("f32_2x3.npy", (np.arange(6, dtype=np.float32) / 4).reshape(2, 3))
np.save("i64_4.npy", np.array([-(2**40), -1, 0, 2**62], dtype=np.int64))
np.save("f16_5.npy", np.array([1.0, -2.5, 65504.0, 6e-8, np.inf], dtype=np.float16))
np.save("bool_2x2.npy", np.array([[True, False], [False, True]]))
np.save("bf16_3.npy", np.array([1.0, -0.5, 3.140625], dtype=ml_dtypes.bfloat16))
np.save("u8_scalar.npy", np.array(200, dtype=np.uint8))
with open("i32_v2.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([7, -8, 9], dtype=np.int32), version=(2, 0))
np.save("f64_fortran.npy", np.asfortranarray(np.ones((2, 3))))
np.save("i32_bigendian.npy", np.array([1, 2, 3], dtype=">i4"))
np.save("u16_unsupported.npy", np.array([1, 2], dtype=np.uint16))
