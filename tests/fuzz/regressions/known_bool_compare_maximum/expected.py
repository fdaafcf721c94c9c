# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, a, b):
    return [R.binary('lt', a, b, 'bool'), R.binary('maximum', a, b, 'bool')]
