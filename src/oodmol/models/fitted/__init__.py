"""Models fitted once on the whole training set, behind the same Lightning contract as
the neural ones (`base.FittedOnceModule`): the training mean (`training_mean`), BOOM's
random forest (`forest`, checkpointed as plain arrays by `tree_arrays`) and BenchML's
ridge, kernel ridge and Gaussian-process regressors (`kernel_regression`, on the kernels
of `kernels`)."""
