"""The configurations the catalogue's tests run, taken from the registry
(``hvd_compress.methods.METHODS``, each method's ``EXAMPLES``): a method added there is tested
here without a change to any test file."""
import hvd_compress as hc
from hvd_compress.compressor import Compressor
from hvd_compress.methods import METHODS


def specs() -> list[str]:
    """Every method's examples, in the catalogue's order."""
    return [spec for cls in METHODS.values() for spec in cls.EXAMPLES]


def encoding() -> list[str]:
    """The examples of methods with a payload to encode and decode (PowerSGD's factors are
    summed by Horovod's allreduce instead: communication/lowrank.py)."""
    return [spec for spec in specs() if "lowrank" not in hc.from_spec(spec).ROUTES]


def invariant() -> list[str]:
    """The examples whose encode and decode keep error feedback's invariant, decoded + new
    residual == gradient + old residual: error feedback on and no momentum of the method's own
    (DGC's and Signum's are checked by their kernel tests and tests/test_horovod.py)."""
    def keeps(c: Compressor) -> bool:
        return c.error_feedback and not getattr(c, "momentum", 0)
    return [spec for spec in encoding() if keeps(hc.from_spec(spec))]


def fused_decoders() -> list[str]:
    """The examples of methods that decode all of a tensor's payloads in one kernel call."""
    return [spec for spec in encoding()
            if type(hc.from_spec(spec)).decode_add_all is not Compressor.decode_add_all]


def firsts() -> list[str]:
    """Each method's first example: its defaults, or the configuration closest to them."""
    return [cls.EXAMPLES[0] for cls in METHODS.values()]


def hierarchical(way: str = "hierarchical") -> list[str]:
    """The examples of methods that take the hierarchical routes, forced onto ``way`` (those
    that choose a route of their own keep it out)."""
    return [f"{spec}{',' if ':' in spec else ':'}communication={way}" for spec in specs()
            if way in hc.from_spec(spec).ROUTES and "communication=" not in spec]
