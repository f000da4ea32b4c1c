"""A user's own models, optimizers and strategies on the grid: hooks, entry points and --gradeff-model-path."""

import fnmatch
import textwrap

import pytest

from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.records.store import read_records
from gradeff.specs.registry import Registry, RegistryClosedError, open_for_registration
from gradeff.studies.hparams import hparams_for

PLUGIN = ("-p", "gradeff.pytest_plugin")

REGISTER = """
from gradeff.axes.models import ModelSpec
from gradeff.axes.optim import OptimizerSpec
from gradeff.axes.strategies import StrategySpec


def build_tiny(profile, **kwargs):
    from gradeff.axes.models.llm import build

    return build(profile, **kwargs)


def pytest_gradeff_register(registries):
    registries.models.register(ModelSpec(key="mymodel", name="My decoder", family="mine", task="causal_lm",
                                         builder=build_tiny, has_biases=False))
    registries.models.register(ModelSpec(key="nockpt", name="No-checkpointing decoder", family="mine",
                                         task="causal_lm", builder=build_tiny, supports_checkpointing=False))
    registries.optimizers.register(OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop",
                                                 state_per_param=1, step_counter=True))
    registries.strategies.register(StrategySpec(key="accum_ckpt", name="Accumulation + checkpointing",
                                                accumulate=True, checkpointing=True))
"""


@pytest.fixture
def user_project(grid_pytester):
    grid_pytester.makeconftest(REGISTER)
    return grid_pytester


def test_registry_takes_entries_only_while_open():
    registry = Registry("model", [MODELS["llm"]])
    with pytest.raises(RegistryClosedError, match="pytest_gradeff_register"):
        registry.register(MODELS["vit"], source="here")
    with open_for_registration([registry]):
        registry.register(MODELS["vit"], source="here")
        with pytest.raises(ValueError, match="duplicate model key 'llm': already registered by gradeff"):
            registry.register(MODELS["llm"], source="there")
    assert list(registry) == ["llm", "vit"] and registry.added() == ["vit"] and registry.source("vit") == "here"
    registry.reset()
    assert list(registry) == ["llm"]


def test_registered_entries_are_grid_cells_with_ids_and_markers(user_project):
    """The conftest's model, optimizer and strategy join the main study; the markers select them exactly."""
    outcome = user_project.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "main")
    outcome.stdout.fnmatch_lines(["*test_cell[[]vit-adam-accum_ckpt[]]*", "*test_cell[[]llm-rmsprop-standard[]]*",
                                  "*test_cell[[]mymodel-rmsprop-accum_ckpt[]]*",
                                  "*test_cell[[]nockpt-sgd-standard[]]*"])
    # 6 models × 7 optimizers × 4 strategies.
    outcome.stdout.fnmatch_lines(["168/* tests collected*"])
    outcome = user_project.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "mine and cell(optimizer='rmsprop')")
    outcome.stdout.fnmatch_lines(["8/* tests collected*"])
    outcome = user_project.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "main", "--gradeff-models", "mymodel",
                                     "--gradeff-optimizers", "rmsprop,adam")
    outcome.stdout.fnmatch_lines(["8/* tests collected*"])
    # Another session in this process starts from the built-in entries again.
    assert "mymodel" not in MODELS and "rmsprop" not in OPTIMIZERS


def test_registered_cells_run_record_report_and_gate(user_project, tmp_path):
    """A registered cell trains and records; it is in the summary, the report and the gate like a built-in one."""
    results, report = tmp_path / "r.jsonl", tmp_path / "report.html"
    args = (*PLUGIN, "-m", "main", "-k", "mymodel-rmsprop-accum_ckpt or nockpt-sgd-checkpoint", "--gradeff-epochs",
            "1", "-p", "no:randomly")
    outcome = user_project.runpytest_subprocess(*args, f"--gradeff-results={results}", f"--gradeff-report={report}")
    outcome.assert_outcomes(passed=1, skipped=1)
    records = {r.cell: r for r in read_records(results)}
    assert records["mymodel-rmsprop-accum_ckpt"].status == "ok"
    assert records["mymodel-rmsprop-accum_ckpt"].meters["memory"]["optimizer_state_bytes"] > 0
    # The capability check and its reason, as for a built-in model.
    assert records["nockpt-sgd-checkpoint"].status == "skipped"
    assert "does not support activation checkpointing" in records["nockpt-sgd-checkpoint"].detail
    outcome.stdout.fnmatch_lines(["*mymodel-rmsprop-accum_ckpt*ok*"])
    assert "My decoder" in report.read_text()
    gated = user_project.runpytest_subprocess(*args, f"--gradeff-results={tmp_path / 'again.jsonl'}",
                                   f"--gradeff-baseline={results}", "--gradeff-compare-args=--time-ratio 100")
    gated.stdout.fnmatch_lines(["*gradeff compare with*no regression*"])
    assert gated.ret == 0


@pytest.mark.parametrize(("body", "message"), [
    ("registries.models.register(ModelSpec(key='llm', name='x', family='decoder', task='causal_lm', builder=len))",
     "*registration from *conftest.py: model 'llm': duplicate model key 'llm': already registered by gradeff*"
     "registered models: vit, modernbert, llm*"),
    ("registries.models.register(ModelSpec(key='nobuild', name='x', family='decoder', task='causal_lm'))",
     "*registration from *conftest.py: model 'nobuild': missing builder*registered models: vit*"),
    ("registries.models.register(ModelSpec(key='gone', name='x', family='decoder', task='causal_lm', "
     "module='no_such_module_here'))", "*model 'gone': missing builder: no module 'no_such_module_here'*"),
    ("registries.optimizers.register({'key': 'rmsprop'})",
     "*conftest.py: optimizer 'rmsprop': expected a gradeff.axes.optim.OptimizerSpec, got dict; registered optimizers: "
     "sgd*"),
    ("registries.models.register(ModelSpec(key='Bad-Key', name='x', family='decoder', task='causal_lm', builder=len))",
     "*model 'Bad-Key': invalid key*"),
    ("registries.models.register(ModelSpec(key='odd', name='x', family='decoder', task='speech', builder=len))",
     "*model 'odd': unknown task 'speech'; valid datasets: causal_lm*"),
    ("registries.methods.register(MethodSpec(key='mine', name='x', module='gradeff.axes.methods.full'), "
     "grids=['main'])",
     "*conftest.py: methods 'mine' cannot join a grid; select it with --gradeff-methods*"),
    ("registries.models.register(ModelSpec(key='m', name='x', family='decoder', task='causal_lm', builder=len), "
     "grids=['nope'])", "*conftest.py: unknown grid 'nope' for models 'm'; valid grids: main, peft*"),
    ("OptimizerSpec(key='x', name='x', target='torch.optim:SGD', state_law='magic')",
     "*registration from *conftest.py: ValueError: optimizer 'x': unknown state law 'magic'*"),
    ("registries.datasets.register(TaskSpec(key='mine', name='x', description='x', "
     "builder='gradeff.axes.data.text:causal_lm', fields=(), kind='causal_lm', sizes={'tiny': {'batch': 8}}))",
     "*conftest.py: dataset 'mine': sizes?'tiny'?: ?'batch'? are not HParams fields; valid: lr, batch_size, *"),
    ("registries.datasets.register(TaskSpec(key='mine', name='x', description='x', "
     "builder='gradeff.axes.data.text:causal_lm', fields=(), kind='causal_lm', sizes={'huge': {'batch_size': 8}}))",
     "*conftest.py: dataset 'mine': sizes?'huge'?: unknown profile; valid profiles: tiny, small, paper*"),
])
def test_bad_registration_is_a_usage_error_naming_the_conftest_and_key(grid_pytester, body, message):
    grid_pytester.makeconftest(f"""
        from gradeff.axes.data import TaskSpec
        from gradeff.axes.methods import MethodSpec
        from gradeff.axes.models import ModelSpec
        from gradeff.axes.optim import OptimizerSpec

        def pytest_gradeff_register(registries):
            {body}
    """)
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", "-q")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    lines = outcome.errlines + outcome.outlines
    assert any(fnmatch.fnmatch(line, message) for line in lines), "\n".join(lines)
    assert "llm" in MODELS and "nobuild" not in MODELS


def test_registries_are_read_only_outside_registration(grid_pytester):
    """An entry added from a test module, after collection started, is refused with where to add it instead."""
    grid_pytester.makepyfile(test_late=textwrap.dedent("""
        import pytest
        from gradeff.axes.models import MODELS
        from gradeff.specs.registry import RegistryClosedError

        def test_late():
            with pytest.raises(RegistryClosedError, match="pytest_gradeff_register"):
                MODELS.register(MODELS["llm"], source="test", replace=True)
    """))
    grid_pytester.runpytest(*PLUGIN, "test_late.py").assert_outcomes(passed=1)


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """A tiny LlamaForCausalLM saved with save_pretrained (vocabulary 128: the tiny text task's ids)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=2, eos_token_id=2, pad_token_id=0)
    folder = tmp_path_factory.mktemp("models") / "Tiny-Llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_model_path_is_a_main_study_model(grid_pytester, llama_folder):
    """--gradeff-model-path: the folder's name is the key, every optimizer × strategy of the main study is a cell."""
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "main and decoder",
                                      f"--gradeff-model-path={llama_folder}")
    ids = [line.split("[")[1].rstrip("]") for line in outcome.outlines if "test_cell[tiny_llama-" in line]
    assert ids == [f"tiny_llama-{o}-{s}" for o in ("sgd", "adam", "adamw", "adagrad", "adadelta", "cgd")
                   for s in ("standard", "checkpoint", "accum")]
    # KEY= names it; its key is a marker like a built-in model's.
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "mine",
                                      f"--gradeff-model-path=mine={llama_folder}:causal_lm")
    outcome.stdout.fnmatch_lines(["*test_cell[[]mine-sgd-standard[]]*", "18/* tests collected*"])
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", "-q", "-m", "main", "--gradeff-models", "mine",
                                      f"--gradeff-model-path=mine={llama_folder}:causal_lm")
    outcome.stdout.fnmatch_lines(["*test_cell[[]mine-sgd-standard[]]*", "18/* tests collected*"])


def test_model_path_cells_train_from_the_folders_weights(grid_pytester, llama_folder, tmp_path):
    results = tmp_path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "-m", "main", "-k", "tiny_llama-adam-standard or tiny_llama-cgd-checkpoint or tiny_llama-sgd-accum",
        "--gradeff-epochs", "1", f"--gradeff-model-path={llama_folder}", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=3)
    records = list(read_records(results))
    assert {r.cell for r in records} == {"tiny_llama-adam-standard", "tiny_llama-cgd-checkpoint",
                                         "tiny_llama-sgd-accum"}
    for record in records:
        assert record.status == "ok" and record.grid == "main" and record.dataset == "causal_lm"
        assert record.weights["source"] == "local" and record.weights["path"] == str(llama_folder)
        # The folder's model, not the suite's tiny Llama (hidden 64, 2 layers).
        assert record.parameters["total"] == sum(
            p.numel() for p in __import__("transformers").LlamaForCausalLM.from_pretrained(llama_folder).parameters())


@pytest.mark.parametrize(("value", "message"), [
    ("{missing}", "*--gradeff-model-path {missing}: no such folder*"),
    ("{empty}", "*--gradeff-model-path {empty}: not a save_pretrained folder*"),
    ("{llama}:speech", "*--gradeff-model-path {llama}:speech: unknown task 'speech'; valid tasks: causal_lm*"),
    ("llm={llama}", "*--gradeff-model-path llm={llama}: model 'llm': duplicate model key 'llm'*"),
])
def test_bad_model_path_is_a_usage_error(grid_pytester, llama_folder, tmp_path, value, message):
    (tmp_path / "empty").mkdir()
    paths = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "llama": llama_folder}
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", f"--gradeff-model-path={value.format(**paths)}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    pattern = message.format(**paths)
    assert any(fnmatch.fnmatch(line, pattern) for line in outcome.errlines + outcome.outlines), outcome.errlines


CUSTOM_BENCH = '''
import pytest


@pytest.mark.parametrize("gradeff_optimizer", ["adam"], indirect=True)
@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_my_step(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
    def step(batch):
        loss = gradeff_model(**batch).loss
        loss.backward()
        gradeff_optimizer.step()
        gradeff_optimizer.zero_grad()
        return loss

    with gradeff_meters as meters:
        for epoch in range(gradeff_data.epochs):
            with meters.epoch() as log:
                for batch in gradeff_data.batches(epoch):
                    log.step(step(batch).item(), samples=len(batch["input_ids"]))
        meters.measure_step(lambda: step(next(gradeff_data.batches(0))))
    record = gradeff_meters.record
    assert record.status == "ok" and record.cell == "llm-adam-my_step"
    assert set(record.meters) >= {"ram", "gpu", "energy", "cost", "memory"}
'''


def test_custom_benchmark_from_public_fixtures_records_like_a_grid_cell(grid_pytester, tmp_path):
    """A test of one's own with only the public fixtures: a record of the grid's schema, meters attached, summarised."""
    import json

    grid_pytester.makepyfile(test_mine=CUSTOM_BENCH)
    results = tmp_path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "test_mine.py", "test_grid.py", "-k", "my_step or llm-adam-standard", "--gradeff-epochs", "1",
        f"--gradeff-results={results}", f"--gradeff-report={tmp_path / 'report.html'}")
    outcome.assert_outcomes(passed=2)
    lines = {json.loads(line)["cell"]: json.loads(line) for line in results.read_text().splitlines()}
    custom, grid = lines["llm-adam-my_step"], lines["llm-adam-standard"]
    assert set(custom) == set(grid) and set(custom["epochs"][0]) == set(grid["epochs"][0])
    assert set(custom["meters"]) == set(grid["meters"]) and set(custom["meters"]["ram"]) == set(grid["meters"]["ram"])
    hp = hparams_for("llm", "tiny")
    steps = hp.train_samples // hp.batch_size
    assert custom["grid"] == "custom" and custom["status"] == "ok" and custom["epochs"][0]["optimizer_steps"] == steps
    assert custom["parameters"] == grid["parameters"] and custom["session"] == grid["session"]
    outcome.stdout.fnmatch_lines(["*llm-adam-my_step*ok*"])
    assert "my_step" in (tmp_path / "report.html").read_text()
    # The gate counts it among the session's selected cells and judges it as any cell (the grid cell the
    # baseline also holds was not selected, so it is not missing).
    gated = grid_pytester.runpytest_subprocess(
        *PLUGIN, "test_mine.py", "--gradeff-epochs", "1", f"--gradeff-results={tmp_path / 'again.jsonl'}",
        f"--gradeff-baseline={results}", "--gradeff-compare-args=--time-ratio 100")
    gated.stdout.fnmatch_lines(["*gradeff compare with*no regression*"])
    assert "llm-adam-standard" not in gated.stdout.str() and gated.ret == 0
    assert (tmp_path / "last-session.cells").read_text() == "llm-adam-my_step\n"


def test_public_fixtures_need_a_model_key(grid_pytester):
    grid_pytester.makepyfile(test_bare="def test_bare(gradeff_model):\n    pass\n")
    outcome = grid_pytester.runpytest(*PLUGIN, "test_bare.py")
    outcome.assert_outcomes(errors=1)
    outcome.stdout.fnmatch_lines(["*gradeff_model needs a model key*models: vit, modernbert, llm*"])


def _installed_package(root, body: str, entry_points: str):
    """A package on a folder of PYTHONPATH with its dist-info, as pip would leave it (no pip needed)."""
    site = root / "site"
    (site / "gradeff_user_pkg").mkdir(parents=True)
    (site / "gradeff_user_pkg" / "__init__.py").write_text(textwrap.dedent(body))
    info = site / "gradeff_user_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gradeff-user-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return site


PACKAGE = """
from gradeff.axes.models import ModelSpec
from gradeff.axes.optim import OptimizerSpec
from gradeff.axes.strategies import StrategySpec


def build(profile, **kwargs):
    from gradeff.axes.models.llm import build

    return build(profile, **kwargs)


MODEL = ModelSpec(key="pkgmodel", name="Packaged decoder", family="decoder", task="causal_lm", builder=build,
                  has_biases=False)
OPTIMIZERS = [OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop", state_per_param=1,
                            step_counter=True)]
STRATEGY = StrategySpec(key="accum_ckpt", name="Accumulation + checkpointing", accumulate=True, checkpointing=True)
DUPLICATE = ModelSpec(key="llm", name="Another llm", family="decoder", task="causal_lm", builder=build)
"""


def test_entry_points_of_an_installed_package_register_like_a_conftest(grid_pytester, tmp_path, monkeypatch):
    site = _installed_package(tmp_path, PACKAGE, """
        [gradeff.models]
        pkgmodel = gradeff_user_pkg:MODEL
        [gradeff.optimizers]
        rmsprop = gradeff_user_pkg:OPTIMIZERS
        [gradeff.strategies]
        accum_ckpt = gradeff_user_pkg:STRATEGY
    """)
    monkeypatch.setenv("PYTHONPATH", str(site))
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, "--collect-only", "-q", "-m", "pkgmodel")
    outcome.stdout.fnmatch_lines(["*test_cell[[]pkgmodel-sgd-standard[]]*",
                                  "*test_cell[[]pkgmodel-rmsprop-accum_ckpt[]]*",
                                  "28/* tests collected*"])
    results = tmp_path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, "-m", "main", "-k", "pkgmodel-rmsprop-accum_ckpt",
                                                 "--gradeff-epochs", "1", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    (record,) = read_records(results)
    assert record.cell == "pkgmodel-rmsprop-accum_ckpt" and record.status == "ok"


def test_bad_entry_point_is_a_usage_error_naming_it(grid_pytester, tmp_path, monkeypatch):
    site = _installed_package(tmp_path, PACKAGE, """
        [gradeff.models]
        llm = gradeff_user_pkg:DUPLICATE
    """)
    monkeypatch.setenv("PYTHONPATH", str(site))
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, "--collect-only", "-q")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*gradeff registration from entry point llm = gradeff_user_pkg:DUPLICATE (group "
                                  "gradeff.models, package gradeff-user-pkg): model 'llm': duplicate model key 'llm'*"])


@pytest.mark.parametrize(("per_param", "holds"), [(1, True), (2, False)])
def test_a_registered_optimizers_state_law_is_checked_like_a_built_in_one(per_param, holds):
    """RMSprop keeps one square average per parameter and a step counter: the right law holds, a wrong one does not."""
    from gradeff.axes.optim import OptimizerSpec
    from gradeff.studies.extend import Registries, check_state_law, reset

    try:
        with open_for_registration([OPTIMIZERS]):
            Registries("test").optimizers.register(
                OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop", state_per_param=per_param,
                              step_counter=True), grids=())
        predicted, measured = check_state_law("rmsprop")
    finally:
        reset()
    assert (predicted == measured) is holds and measured > 0


@pytest.mark.parametrize(("scalars", "holds"), [(1, True), (0, False)])
def test_an_optimizer_with_scalars_of_its_own_describes_its_state(scalars, holds):
    """NAdam keeps m, v, a step and mu_product per parameter: two dense tensors and two scalars; without its
    mu_product the law is short by 4 bytes a parameter tensor."""
    from gradeff.axes.optim import OptimizerSpec
    from gradeff.studies.extend import Registries, check_state_law, reset

    try:
        with open_for_registration([OPTIMIZERS]):
            Registries("test").optimizers.register(
                OptimizerSpec(key="nadam", name="NAdam", target="torch.optim:NAdam", state_per_param=2,
                              step_counter=True, scalars_per_param=scalars), grids=())
        predicted, measured = check_state_law("nadam")
    finally:
        reset()
    assert (predicted == measured) is holds and measured > 0
    with pytest.raises(ValueError, match="scalars_per_param is a count >= 0"):
        OptimizerSpec(key="x", name="X", target="torch.optim:SGD", scalars_per_param=-1)


def test_registered_entries_reach_an_isolated_cell(user_project, tmp_path):
    """--gradeff-isolate: the spawned process that trains the cell registers the conftest's entries too."""
    results = tmp_path / "r.jsonl"
    outcome = user_project.runpytest_subprocess(*PLUGIN, "-m", "main", "-k", "mymodel-rmsprop-accum_ckpt",
                                                "--gradeff-isolate", "--gradeff-epochs", "1",
                                                f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    (record,) = read_records(results)
    assert record.status == "ok" and record.environment["process"] == "isolated"


def test_gradeff_list_shows_an_installed_packages_entries(tmp_path):
    import os
    import subprocess
    import sys

    site = _installed_package(tmp_path, PACKAGE, """
        [gradeff.optimizers]
        rmsprop = gradeff_user_pkg:OPTIMIZERS
    """)
    env = os.environ | {"PYTHONPATH": str(site)}
    listing = subprocess.run([sys.executable, "-m", "gradeff", "list"], capture_output=True, text=True, env=env,
                             check=True).stdout
    (line,) = [line for line in listing.splitlines() if line.split()[0] == "rmsprop"]
    assert line.split()[1] == "RMSprop" and "(entry point rmsprop = gradeff_user_pkg:OPTIMIZERS" in line
    keys = subprocess.run([sys.executable, "-m", "gradeff", "list", "optimizers"], capture_output=True, text=True,
                          env=env, check=True).stdout.split()
    assert keys[-1] == "rmsprop" and keys[0] == "sgd"


def test_a_model_path_too_small_for_the_datas_vocabulary_says_so(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from gradeff.studies.extend import Registries, model_path_spec, reset

    folder = tmp_path / "small_vocab"
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
    spec = model_path_spec(str(folder))
    try:
        with open_for_registration([MODELS]):
            Registries("test").models.register(spec, grids=())
        with pytest.raises(ValueError, match="vocabulary of 64 tokens, the data's is 128; the tiny text task uses ids"):
            spec.builder("tiny")
        with pytest.raises(ValueError, match="the data's is 5000; tokenise the text with the folder's own tokenizer"):
            spec.builder("tiny", vocab_size=5000)
    finally:
        reset()


DORA_AND_RMSPROP = """
from gradeff.axes.methods import Adapted, MethodSpec
from gradeff.axes.optim import OptimizerSpec


def apply_dora(model, hp, *, total_steps, head=()):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=hp.lora_r, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout, use_dora=True,
                        target_modules=list(hp.target_modules), modules_to_save=list(head) or None)
    return Adapted(model=get_peft_model(model, config))


def pytest_gradeff_register(registries):
    registries.methods.register(MethodSpec(key="dora", name="DoRA", apply=apply_dora, requires=(("peft", "peft"),),
                                           hparams={"lr_scale": 10.0, "lora_r": 4}))
    # No lr_centre: a rate search centres on the cell's own rate.
    registries.optimizers.register(OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop",
                                                 state_per_param=1, step_counter=True))
"""


def test_a_method_and_an_optimizer_registered_with_their_own_settings_run_tuned(grid_pytester, tmp_path):
    """A DoRA method (peft's use_dora) and an RMSprop without a search centre, each registered in one conftest,
    train a tuned cell end to end: the method's settings reach the record, the search centres on the cell's rate."""
    grid_pytester.makeconftest(DORA_AND_RMSPROP)
    results = tmp_path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "-m", "main", "-k", "llm-rmsprop-standard-dora", "--gradeff-methods", "dora",
        "--gradeff-optimizers", "rmsprop", "--gradeff-tune", "lr", "--gradeff-tune-points", "2",
        "--gradeff-epochs", "1", "-p", "no:randomly", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    (record,) = read_records(results)
    assert record.status == "ok", record.detail
    method = record.hparams["method"]
    # The chosen rate replaces the model's rate × the method's scale: the record's scale is then 1.
    assert (method["lr_scale"], method["lora_r"], method["lora_alpha"]) == (1.0, 4, 16)
    assert record.hparams["lr"] == record.tuning["chosen"]
    assert method["target_modules"] == list(MODELS["llm"].lora_targets)
    reference = hparams_for("llm", "tiny").lr * 10.0
    assert record.tuning["reference"] == pytest.approx(reference)
    # Two points around the cell's own rate (one decade either side of it), plus the rate itself.
    assert (sorted(t["lr"] for t in record.tuning["trials"])
            == pytest.approx([reference / 10, reference, reference * 10]))


def test_spec_settings_are_checked_when_the_spec_is_made():
    from gradeff.axes.methods import MethodSpec
    from gradeff.axes.optim import OptimizerSpec

    with pytest.raises(ValueError, match=r"unknown hparams \['lora_rank'\]; known: adalora_delta_t, .*lora_r, "):
        MethodSpec(key="mine", name="Mine", module="mine", hparams={"lora_rank": 4})
    with pytest.raises(ValueError, match="give module=.* or apply=<function>, not both"):
        MethodSpec(key="mine", name="Mine")
    with pytest.raises(ValueError, match="not both"):
        MethodSpec(key="mine", name="Mine", module="mine", apply=len)
    with pytest.raises(ValueError, match="lr_centre must be > 0, got 0"):
        OptimizerSpec(key="mine", name="Mine", target="torch.optim:SGD", lr_centre=0)
    # The cell sets the rate and the kernel: a spec that fixes them would fail every cell with "multiple values".
    for taken in ("lr", "params", "fused", "foreach"):
        with pytest.raises(ValueError, match=rf"kwargs \['{taken}'\] are the cell's to set .* lr_centre="):
            OptimizerSpec(key="nadam", name="NAdam", target="torch.optim:NAdam", kwargs={taken: 1e-3})
    spec = MethodSpec(key="mine", name="Mine", apply=len, hparams={"lora_r": 4})
    with pytest.raises(TypeError):
        spec.hparams["lora_r"] = 8  # read-only: a spec is shared by every cell


def test_a_registered_dataset_brings_its_own_sizes_as_a_built_in_one_does():
    """``TaskSpec.sizes`` replaces the model's fields where a cell trains on the dataset, at the profiles it names,
    exactly as CIFAR-100's own sizes do for the built-in backbones."""
    from dataclasses import replace

    from gradeff.axes.data import TASKS

    assert hparams_for("vit_s", "paper", dataset="cifar100").num_classes == 100
    assert hparams_for("vit_s", "paper", dataset="dtd").train_samples == 1_792
    mine = replace(TASKS["causal_lm"], key="mytext", sizes={"tiny": {"batch_size": 8, "train_samples": 64}})
    with open_for_registration([TASKS]):
        TASKS.register(mine, source="test")
    try:
        own, model = hparams_for("llm", "tiny", dataset="mytext"), hparams_for("llm", "tiny")
        assert (own.batch_size, own.train_samples) == (8, 64)
        assert replace(own, batch_size=model.batch_size, train_samples=model.train_samples) == model
        assert hparams_for("llm", "small", dataset="mytext") == hparams_for("llm", "small")  # no sizes there
    finally:
        TASKS.reset()
