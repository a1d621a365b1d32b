from oodmol.overrides import deferred_to_jobs


def test_a_multiruns_single_choices_of_nested_groups_wait_for_the_jobs():
    overrides = [
        "model=ridge,krr_rbf",
        "model/representation=descriptors_physics",
        "model/representation@model.extra=soap",
        "task=qm9_r2",
        "hydra/launcher=joblib",
        "+model/representation=soap",
        "model/representation=soap,mbtr",
        "model.module.alphas=[1,2]",
    ]
    assert deferred_to_jobs(overrides) == {
        "model/representation=descriptors_physics": (
            "model/representation=choice(descriptors_physics)"
        ),
        "model/representation@model.extra=soap": "model/representation@model.extra=choice(soap)",
    }
