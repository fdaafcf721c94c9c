# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x):
    return [R.reduce('max', x, None, False, 'f32'), R.reduce('argmax', x, -1, False, 'i64')]
