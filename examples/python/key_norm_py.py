"""key-norm as a Python scorer: keeps the keys with the lowest L2 norm plus
the most recent slots (Devoto et al. 2024), the C++ key-norm's rule, so its
kept slots and logits equal key-norm's (python/tests/test_policies.py)."""
import kvlab


class KeyNormPy(kvlab.ScorerPolicy):
    """keeps the keys with the lowest L2 norm (Python)"""

    def score(self, keys, values, attention, positions, state):
        # key-norm's norm: the sum of squares in float64, rounded to float32.
        return -keys.double().pow(2).sum(dim=1).sqrt().float()


kvlab.register_policy("key-norm-py", KeyNormPy)
