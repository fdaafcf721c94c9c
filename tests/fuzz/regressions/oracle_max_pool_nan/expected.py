# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x):
    return [R.pool2d(x, 1, 0, 0, 'max', 'f32')]
