# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, i, j):
    return [R.binary('div', i, j, 'i64')]
