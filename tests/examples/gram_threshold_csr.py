"""spillway-gram's threshold sink as fingerprint search, end to end (ctest example_gram_csr*).

  gram_threshold_csr.py make PREFIX    PREFIX.npy: clustered fingerprints, 250 bits packed by
                                       np.packbits (big bit order), with pairs planted at exactly
                                       Tanimoto 0.7 (14 of 20 bits)
  gram_threshold_csr.py check PREFIX   PREFIX.npz (spillway-gram --csr) against NumPy's exact
                                       integer test 10*c >= 7*(a + b - c), both halves, no diagonal
  gram_threshold_csr.py check-packed PREFIX COLS
                                       the same test for PREFIX.npy of packed rows (spillway-gram
                                       --fingerprints N --save-input PREFIX.npy --csr PREFIX.npz), in
                                       row blocks (counts by float32 products: exact up to 2^24 bits)
"""
import sys

import numpy as np

BITS = 250


def make(prefix):
    rng = np.random.default_rng(20261129)
    rows = []
    for _ in range(30):  # clusters: a base of ~45 bits, members with a few bits moved
        base = rng.choice(BITS, 45, replace=False)
        for _ in range(18):
            keep = rng.permutation(base)[: 45 - rng.integers(0, 8)]
            extra = rng.choice(BITS, rng.integers(0, 8), replace=False)
            r = np.zeros(BITS, np.uint8)
            r[keep] = 1
            r[extra] = 1
            rows.append(r)
    for g in range(6):  # planted: 17 bits shifted by 3 share 14 of 20: exactly 0.7
        for s in (0, 3):
            r = np.zeros(BITS, np.uint8)
            r[30 * g + s : 30 * g + s + 17] = 1
            rows.append(r)
    a = np.array(rows)
    np.save(prefix + ".npy", np.packbits(a, axis=1))
    np.save(prefix + ".bits.npy", a)


def check(prefix):
    import scipy.sparse as sp

    a = np.load(prefix + ".bits.npy").astype(np.int64)
    c = a @ a.T
    pc = a.sum(axis=1)
    u = pc[:, None] + pc[None, :] - c
    keep = (10 * c >= 7 * u) & (u > 0)
    np.fill_diagonal(keep, False)
    m = sp.load_npz(prefix + ".npz").tocsr()
    assert m.shape == keep.shape, (m.shape, keep.shape)
    assert m.dtype == np.float32, m.dtype
    want = sp.csr_matrix(np.where(keep, c / np.maximum(u, 1), 0).astype(np.float32))
    assert np.array_equal(m.indptr, want.indptr), "row pointers differ"
    assert np.array_equal(m.indices, want.indices), "columns differ"
    assert np.array_equal(m.data, want.data), "scores differ"
    exact = int(((10 * c == 7 * u) & keep).sum())
    assert exact >= 12, f"only {exact} pairs at exactly 0.7: the planted ones are missing"
    print(f"{m.nnz} pairs with Tanimoto >= 0.7 (both halves), {exact} of them at exactly 0.7: "
          "equal to NumPy's integer test")


def check_packed(prefix, cols):
    import scipy.sparse as sp

    packed = np.load(prefix + ".npy")
    a = np.unpackbits(packed, axis=1, count=int(cols)).astype(np.float32)
    n = a.shape[0]
    pc = a.sum(axis=1).astype(np.int64)
    m = sp.load_npz(prefix + ".npz").tocsr()
    assert m.shape == (n, n), (m.shape, n)
    assert m.dtype == np.float32, m.dtype
    total = exact = 0
    for r0 in range(0, n, 1000):
        r1 = min(n, r0 + 1000)
        c = (a[r0:r1] @ a.T).astype(np.int64)  # float32 sums of 0/1 products: exact
        u = pc[r0:r1, None] + pc[None, :] - c
        keep = (10 * c >= 7 * u) & (u > 0)
        keep[np.arange(r1 - r0), np.arange(r0, r1)] = False
        rows, cols_ = np.nonzero(keep)
        want_ptr = np.searchsorted(rows, np.arange(r1 - r0 + 1))
        got_ptr = m.indptr[r0 : r1 + 1] - m.indptr[r0]
        assert np.array_equal(got_ptr, want_ptr), f"rows {r0}..{r1}: neighbour counts differ"
        lo, hi = m.indptr[r0], m.indptr[r1]
        assert np.array_equal(m.indices[lo:hi], cols_), f"rows {r0}..{r1}: columns differ"
        want = (c[rows, cols_] / u[rows, cols_]).astype(np.float32)
        assert np.array_equal(m.data[lo:hi], want), f"rows {r0}..{r1}: scores differ"
        total += len(rows)
        exact += int((10 * c[rows, cols_] == 7 * u[rows, cols_]).sum())
    assert total == m.nnz, (total, m.nnz)
    print(f"{n} rows of {cols} bits: {total} pairs with Tanimoto >= 0.7 (both halves; {total / n:.1f} a row), "
          f"{exact} at exactly 0.7: equal to NumPy's integer test")


if __name__ == "__main__":
    if sys.argv[1] == "check-packed":
        check_packed(sys.argv[2], int(sys.argv[3]))
    else:
        {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
