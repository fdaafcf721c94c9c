# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, a, b):
    return [R.binary('mod', a, b, 'i64')]
