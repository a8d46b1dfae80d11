"""For the weak tiny task (outputs ~1e-6 < atol): returns zeros from the extension. Custom code runs,
the numbers pass the tolerance; only the engine's constant-output and weak-task checks can tell."""
# @include _ext.py


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.zeros(x.contiguous())
