# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, v):
    r = v
    for _ in range(3):
        r = r[1:]
    return [r]
