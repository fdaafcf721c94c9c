# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x2, x5, v4):
    np = R.np
    v6 = R.matmul(x2, x5, 'f32')
    v10 = R.cast(v6, 'f16')
    return [v4]
