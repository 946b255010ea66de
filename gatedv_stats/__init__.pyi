# The types of the names `gatedv_stats/__init__.py` imports lazily, for type checkers.
from gatedv_stats.analysis.experiment import AnalysisSettings as AnalysisSettings
from gatedv_stats.api import analyze as analyze
from gatedv_stats.api import arms as arms
from gatedv_stats.api import compare as compare
from gatedv_stats.api import load as load
from gatedv_stats.api import noise_floor as noise_floor
from gatedv_stats.api import pair as pair
from gatedv_stats.api import plan as plan
from gatedv_stats.api import report as report
from gatedv_stats.api import sequential as sequential
from gatedv_stats.core.errors import InputError as InputError
from gatedv_stats.core.errors import ParameterError as ParameterError
from gatedv_stats.ledger import Ledger as Ledger
from gatedv_stats.pairing.paired import Paired as Paired
from gatedv_stats.pairing.paired import PairedLosses as PairedLosses
from gatedv_stats.results import AnalysisResult as AnalysisResult
from gatedv_stats.results import ArmsResult as ArmsResult
from gatedv_stats.results import ComparisonResult as ComparisonResult
from gatedv_stats.results import FloorPlanResult as FloorPlanResult
from gatedv_stats.results import LedgerEntryResult as LedgerEntryResult
from gatedv_stats.results import LedgerResult as LedgerResult
from gatedv_stats.results import NoiseFloorResult as NoiseFloorResult
from gatedv_stats.results import PlanResult as PlanResult
from gatedv_stats.results import Runs as Runs
from gatedv_stats.results import SequentialResult as SequentialResult

__version__: str
__all__: list[str]
