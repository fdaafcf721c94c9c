# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, x1, x6, x10, x12):
    np = R.np
    v2 = R.clip(x1, -2.0, 4.5, 'f16')
    v3 = R.slice_(x1, [('p', 0,), ('s', -1, 0, None,), ('s', -6, 0, 2,), ('s', 1, None, 1,)])
    v4 = R.slice_(v3, [('s', 2, 0, None,), ('s', -3, 0, 3,), ('s', None, None, None,)])
    v5 = R.slice_(v4, [('s', None, None, None,), ('s', 3, -1, 3,), ('s', None, None, None,)])
    (v7, v8) = R.topk(x6, 0, 0)
    v9 = R.unary('exp', v4, 'f16')
    v11 = R.binary('div', x10, R.to(np.array(3.0), 'f32'), 'f32')
    (v13, v14, v15) = R.split(x12, [1, 5, 1], 1)
    return [v15, v2, v5]
