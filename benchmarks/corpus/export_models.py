"""Export the corpus models that come from real exporters (torch.onnx, skl2onnx).

Why this file exists: the corpus must contain ONNX files written by the tools users actually
use, not by this project. Those tools (torch, torchvision, transformers, scikit-learn,
skl2onnx) are heavy and are *bench-time* dependencies only, so this script runs in a separate
Python environment (the "exporter venv", see README.md) and ``fetch.py`` calls it once per
model as a subprocess::

    /root/corpus-venv/bin/python export_models.py RECIPE OUT.onnx

Every recipe builds a real architecture with random weights (``torch.manual_seed(0)``, no hub
download: ``weights=None`` / a ``transformers`` config) or fits a scikit-learn estimator on a
dataset bundled with scikit-learn, and writes the ONNX file with the library's own exporter.
It prints one JSON line describing what it exported (exporter and library versions).

Exit status 3 means a library the recipe needs is not importable; the message names the pip
command that provides it (``fetch.py`` turns that into a "skipped" line, not a crash).
"""

from __future__ import annotations

import json
import sys

OPSET = 17

# recipe -> pip command that provides its exporter
PIP_HINT = {
    "torch": "pip install torch==2.14.1 torchvision==0.29.1 onnxscript onnx==1.23.2",
    "transformers": "pip install torch==2.14.1 transformers onnxscript",
    "sklearn": "pip install scikit-learn skl2onnx onnx==1.23.2",
}


class MissingExporter(Exception):
    pass


def _need(module: str, hint: str):
    try:
        return __import__(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "exporter missing"
        raise MissingExporter(f"{module} is not importable here ({exc}); "
                              f"install it with: {PIP_HINT[hint]}") from None


# ---------------------------------------------------------------------------- torch helpers
def _torch_export(model, args, out, input_names, output_names, dynamo=False,
                  dynamic_axes=None):
    torch = _need("torch", "torch")
    model.eval()
    with torch.no_grad():
        if dynamo:
            _need("onnxscript", "torch")
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=18,
                                     input_names=input_names, output_names=output_names,
                                     external_data=False, optimize=True)
            prog.save(out, external_data=False)
        else:
            torch.onnx.export(model, args, out, dynamo=False, opset_version=OPSET,
                              input_names=input_names, output_names=output_names,
                              do_constant_folding=True, dynamic_axes=dynamic_axes)
    return {"exporter": "torch.onnx (dynamo)" if dynamo else "torch.onnx (TorchScript)",
            "torch": torch.__version__, "opset": 18 if dynamo else OPSET}


def _calibrate_batchnorm(torch, model, size):
    """Set BatchNorm running statistics from a few batches of ImageNet-normalised random
    images, as a (briefly) trained net has them. With the freshly initialised statistics
    (mean 0, var 1) activations of random-weight nets vanish layer after layer (googlenet's
    output is then exactly its fc bias, efficientnet's ~1e-14): a comparison of such outputs
    would test nothing. Weights stay random; only the running statistics change."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model((torch.rand(4, 3, size, size) - mean) / std)
    model.eval()


def torchvision_model(arch: str, out: str, dynamo: bool = False, size=224, **kw):
    torch = _need("torch", "torch")
    tv = _need("torchvision", "torch")
    torch.manual_seed(0)
    fn = getattr(tv.models, arch, None)
    if fn is None:
        fn = getattr(tv.models.segmentation, arch, None) or getattr(tv.models.detection, arch)
    model = fn(weights=None, **kw)
    _calibrate_batchnorm(torch, model, size)
    x = torch.rand(1, 3, size, size)
    meta = _torch_export(model, (x,), out, ["input"], None, dynamo=dynamo)
    meta.update(torchvision=tv.__version__, architecture=f"torchvision.models.{arch}")
    return meta


def torchvision_detection(arch: str, out: str, size: int, **kw):
    torch = _need("torch", "torch")
    tv = _need("torchvision", "torch")
    torch.manual_seed(0)
    model = getattr(tv.models.detection, arch)(weights=None, weights_backbone=None, **kw)
    model.eval()
    x = [torch.rand(3, size, size)]
    meta = _torch_export(model, (x,), out, ["images"], ["boxes", "scores", "labels"])
    meta.update(torchvision=tv.__version__,
                architecture=f"torchvision.models.detection.{arch}")
    return meta


class _Logits:
    """Wrap a transformers model so the exported graph returns plain tensors."""

    def __new__(cls, model, key, names):
        torch = _need("torch", "torch")

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                return getattr(self.m(**dict(zip(names, args))), key)

        return W()


def hf_model(kind: str, out: str, dynamo: bool = False):
    tr = _need("transformers", "transformers")
    torch = _need("torch", "transformers")
    torch.manual_seed(0)
    seq = 32
    if kind == "bert":
        cfg = tr.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=512)
        model = tr.BertModel(cfg)
        ids = torch.randint(0, cfg.vocab_size, (1, seq))
        args = (ids, torch.ones(1, seq, dtype=torch.int64),
                torch.zeros(1, seq, dtype=torch.int64))
        names, key = ["input_ids", "attention_mask", "token_type_ids"], "last_hidden_state"
    elif kind == "distilbert_cls":
        cfg = tr.DistilBertConfig(dim=128, n_layers=2, n_heads=2, hidden_dim=512, num_labels=3)
        model = tr.DistilBertForSequenceClassification(cfg)
        args = (torch.randint(0, cfg.vocab_size, (1, seq)), torch.ones(1, seq, dtype=torch.int64))
        names, key = ["input_ids", "attention_mask"], "logits"
    elif kind == "gpt2":
        cfg = tr.GPT2Config(n_embd=128, n_layer=2, n_head=2, use_cache=False)
        model = tr.GPT2LMHeadModel(cfg)
        args = (torch.randint(0, cfg.vocab_size, (1, seq)), torch.ones(1, seq, dtype=torch.int64))
        names, key = ["input_ids", "attention_mask"], "logits"
    elif kind == "t5":
        cfg = tr.T5Config(d_model=128, d_ff=256, num_layers=2, num_decoder_layers=2,
                          num_heads=2, d_kv=32, vocab_size=32128, use_cache=False)
        model = tr.T5ForConditionalGeneration(cfg)
        args = (torch.randint(0, cfg.vocab_size, (1, seq)), torch.ones(1, seq, dtype=torch.int64),
                torch.randint(0, cfg.vocab_size, (1, 8)))
        names, key = ["input_ids", "attention_mask", "decoder_input_ids"], "logits"

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, a, b, c):
                return self.m(input_ids=a, attention_mask=b, decoder_input_ids=c).logits

        wrapped = W()
    elif kind == "vit":
        cfg = tr.ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=256, image_size=224, patch_size=16, num_labels=10)
        model = tr.ViTForImageClassification(cfg)
        args = (torch.rand(1, 3, 224, 224),)
        names, key = ["pixel_values"], "logits"
    elif kind == "wav2vec2":
        cfg = tr.Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=256, vocab_size=32)
        model = tr.Wav2Vec2ForCTC(cfg)
        args = (torch.randn(1, 16000) * 0.1,)
        names, key = ["input_values"], "logits"
    elif kind == "whisper_encoder":
        cfg = tr.WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=2,
                               decoder_layers=2, decoder_attention_heads=2,
                               encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                               max_source_positions=1500)
        model = tr.WhisperModel(cfg).get_encoder()
        args = (torch.randn(1, 80, 3000),)
        names, key = ["input_features"], "last_hidden_state"
    else:
        raise SystemExit(f"unknown transformers recipe {kind!r}")
    model.eval()
    if kind != "t5":
        wrapped = _Logits(model, key, names)
    meta = _torch_export(wrapped, args, out, names, ["output"], dynamo=dynamo)
    meta.update(transformers=tr.__version__, architecture=f"transformers {type(model).__name__}",
                config={k: v for k, v in cfg.to_diff_dict().items()
                        if isinstance(v, (int, float, str)) and k != "transformers_version"})
    return meta


# ---------------------------------------------------------------------------- scikit-learn
def sklearn_model(kind: str, out: str):
    _need("sklearn", "sklearn")
    skl2onnx = _need("skl2onnx", "sklearn")
    import numpy as np
    import sklearn
    from sklearn import datasets, ensemble, linear_model, pipeline, preprocessing, tree, svm
    from skl2onnx import to_onnx

    zipmap = True
    if kind == "logreg_iris_zipmap":
        X, y = datasets.load_iris(return_X_y=True)
        est = pipeline.make_pipeline(preprocessing.StandardScaler(),
                                     linear_model.LogisticRegression(max_iter=500))
    elif kind == "random_forest_wine":
        X, y = datasets.load_wine(return_X_y=True)
        est = ensemble.RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0)
        zipmap = False
    elif kind == "gbr_diabetes":
        X, y = datasets.load_diabetes(return_X_y=True)
        est = ensemble.GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0)
    elif kind == "scaler_linreg_diabetes":
        X, y = datasets.load_diabetes(return_X_y=True)
        est = pipeline.make_pipeline(preprocessing.StandardScaler(),
                                     linear_model.Ridge(alpha=1.0))
    elif kind == "dtree_breast_cancer_zipmap":
        X, y = datasets.load_breast_cancer(return_X_y=True)
        est = tree.DecisionTreeClassifier(max_depth=5, random_state=0)
    elif kind == "extra_trees_breast_cancer":
        X, y = datasets.load_breast_cancer(return_X_y=True)
        est = ensemble.ExtraTreesClassifier(n_estimators=10, max_depth=6, random_state=0)
        zipmap = False
    elif kind == "minmax_svc_iris":
        X, y = datasets.load_iris(return_X_y=True)
        est = pipeline.make_pipeline(preprocessing.MinMaxScaler(), svm.SVC(probability=False))
        zipmap = False
    else:
        raise SystemExit(f"unknown sklearn recipe {kind!r}")
    X = X.astype(np.float32)
    est.fit(X, y)
    opts = None
    if hasattr(est, "predict_proba") or hasattr(est, "classes_"):
        opts = {id(est): {"zipmap": zipmap}} if not zipmap else None
    onx = to_onnx(est, X[:1], target_opset={"": OPSET, "ai.onnx.ml": 3}, options=opts)
    # skl2onnx lists opset_import in set order, which str hashing (PYTHONHASHSEED) decides:
    # sorted, the bytes are the same in every process
    imports = sorted(onx.opset_import, key=lambda o: (o.domain, o.version))
    del onx.opset_import[:]
    onx.opset_import.extend(imports)
    with open(out, "wb") as f:
        f.write(onx.SerializeToString())
    return {"exporter": "skl2onnx", "skl2onnx": skl2onnx.__version__,
            "sklearn": sklearn.__version__, "opset": OPSET, "ml_opset": 3,
            "architecture": f"sklearn {est!r}".replace("\n", " "),
            "feature_mean": [round(float(v), 6) for v in X.mean(0)],
            "feature_std": [round(float(v), 6) for v in X.std(0)]}


# ---------------------------------------------------------------------------- dispatcher
def run(recipe: str, out: str) -> dict:
    family, _, name = recipe.partition(":")
    if family == "torchvision":
        return torchvision_model(name, out)
    if family == "torchvision-dynamo":
        return torchvision_model(name, out, dynamo=True)
    if family == "torchvision-seg":
        return torchvision_model(name, out, size=256, weights_backbone=None, aux_loss=False)
    if family == "torchvision-det":
        return torchvision_detection(name, out, size=320)
    if family == "transformers":
        return hf_model(name, out)
    if family == "transformers-dynamo":
        return hf_model(name, out, dynamo=True)
    if family == "sklearn":
        return sklearn_model(name, out)
    raise SystemExit(f"unknown recipe {recipe!r}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__)
        return 2
    try:
        meta = run(argv[0], argv[1])
    except MissingExporter as exc:
        print(f"missing exporter: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(meta, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
