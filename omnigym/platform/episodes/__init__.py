"""Recorded episodes: the format that ``eval``, ``eval-agent`` and ``collect`` write and ``view`` replays.

Also its conversion to and from Minari datasets (``docs/episodes.md``).
"""

from omnigym.platform.episodes.format import (
    Episode,
    EpisodeSteps,
    EpisodeSummary,
    Recording,
    RecordingError,
    RecordingWriter,
)

__all__ = ["Episode", "EpisodeSteps", "EpisodeSummary", "Recording", "RecordingError", "RecordingWriter"]
