"""files.yaml_data builds what yaml.load with libyaml's safe loader builds (the rule table reads rules.yaml with it)."""

import pytest
import yaml

from moetune.files import shipped_text, yaml_data

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.mark.parametrize("name", ["rules.yaml", "diagnose_remedies.yaml", "kernel_classes.yaml"])
def test_shipped_yaml_reads_as_pyyaml_reads_it(name):
    text = shipped_text(name)
    assert yaml_data(text) == yaml.load(text, Loader=LOADER)  # noqa: S506 -- a safe loader


@pytest.mark.parametrize("text", [
    "", "a", "[1, 2.5, true, null, x, '1']", "{a: 1, b: [x, {c: d}], 1: 2, null: 3}",
    "a: &x [1]\nb: *x", "a: &x {k: v}\nb: {<<: *x, z: 1}",  # an alias, a merge key
    "!!str 12", "!!set {a, b}", "- !!binary aGVsbG8=", "x: 2001-12-14", "a: 1\na: 2",
    "!!map {a: 1}", "!!omap [a: 1]", "- !!float 1", "{a: {b: [{c: !!int '3'}]}}",
])
def test_reads_as_pyyaml_reads(text):
    assert yaml_data(text) == yaml.load(text, Loader=LOADER)  # noqa: S506 -- a safe loader


def test_an_alias_inside_itself_is_pyyamls():
    data = yaml_data("&a [1, *a]")
    assert data[0] == 1 and data[1] is data


@pytest.mark.parametrize("text", ["a: [1", "? [1]\n: 2", "a: b: c", "!!int x"])  # the key a list: unhashable
def test_bad_yaml_raises_as_pyyaml_does(text):
    with pytest.raises((yaml.YAMLError, ValueError)) as expected:
        yaml.load(text, Loader=LOADER)  # noqa: S506 -- a safe loader
    with pytest.raises(type(expected.value)):
        yaml_data(text)
