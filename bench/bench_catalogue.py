"""Which methods the benches run, taken from the registry (``hvd_compress.METHODS``): a method
added there is benched without a change here, at its defaults."""
import hvd_compress as hc

#: the three design-card methods, run in every cell
COMPRESSORS = ["topk:ratio=0.01", "onebit", "adacomp"]
# the spelling earlier results were recorded under, where it is not the method's bare name
SPELLED = {"topk": "topk:ratio=0.01", "powersgd": "powersgd:rank=1"}
#: the rest of the catalogue, each at its defaults (with error feedback where its paper has it)
CATALOGUE = [SPELLED.get(name, name) for name in hc.METHODS if SPELLED.get(name, name) not in COMPRESSORS]
SIGN_SGD = ["--lr", "0.0005", "--momentum", "0"]  # per worker, scaled by world size as always
#: the optimizer options (the examples' flags) a method needs instead of the examples' own: DGC
#: keeps the momentum itself, and signSGD's majority vote moves every weight by exactly lr each
#: step, so it takes plain SGD at a small lr, as its paper does
OPTIMIZER = {"dgc": ["--momentum", "0"], "signsgd": SIGN_SGD, "signum": SIGN_SGD}
