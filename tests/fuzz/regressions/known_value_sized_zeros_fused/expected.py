# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, m):
    n = int(np.sum(m))
    return [np.ones(n, np.float32)]
