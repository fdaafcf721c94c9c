# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x3, v6):
    np = R.np
    v4 = R.unary('cos', x3, 'f32')
    r7 = v6
    k9 = 0
    while k9 < 3:
        r7 = r7[1:]
        k9 = k9 + 1
    v10 = R.to(np.full((0, 0), 3.0), 'bool')
    return [v4]
