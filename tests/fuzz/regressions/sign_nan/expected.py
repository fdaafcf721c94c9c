# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x):
    return [R.unary('sign', x, 'f32')]
