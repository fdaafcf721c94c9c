# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x):
    return [x[:, -2:2]]
