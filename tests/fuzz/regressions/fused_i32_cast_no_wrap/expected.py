# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs
def program(R, a, b):
    return [R.cast(R.binary('mul', a, b, 'i32'), 'f32'), R.cast(R.binary('add', a, b, 'i32'), 'i64')]
