# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x10, x17, v9):
    np = R.np
    v11 = R.matmul(v9, x10, 'f32')
    v14 = np.transpose(v11, (0, 1, 3, 2))
    v16 = R.binary('minimum', v14, R.to(np.array(100.0), 'f32'), 'f32')
    v18 = R.binary('minimum', v16, x17, 'f32')
    return [v18]
