"""spillway.show_config(): what this build of spillway holds and what it finds on this machine."""

from __future__ import annotations

from typing import Any

from . import _core


def _parse_archs(text: str) -> list[dict[str, Any]]:
    """CMake's CUDA architecture entries ("80-real", "90a-real", "90-virtual", "90a") as the SASS
    and PTX they put into the module."""
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        arch, _, kind = entry.partition("-")
        digits = arch.rstrip("af")
        if not digits.isdigit():  # "native", "all", "all-major": not resolved at build time
            out.append({"entry": entry, "arch": arch})
            continue
        major, minor = int(digits[:-1]), int(digits[-1])
        out.append({"entry": entry, "arch": arch, "cc": (major, minor), "suffix": arch[len(digits):],
                    "sass": kind in ("", "real"), "ptx": kind in ("", "virtual")})
    return out


def _code_for(cc: tuple[int, int], archs: list[dict[str, Any]]) -> str:
    """Which of the module's code a GPU of compute capability `cc` runs (the CUDA rules: SASS of
    x.y runs on x.z for z >= y, "a" SASS only on exactly its x.y; PTX of x.y is compiled by the
    driver for any later GPU, "a" PTX only for its own x.y), or why none."""
    sass = [a for a in archs if a.get("sass") and a["cc"][0] == cc[0] and a["cc"][1] <= cc[1]
            and (a["suffix"] != "a" or a["cc"] == cc)]
    if sass:
        best = max(sass, key=lambda a: (a["cc"], a["suffix"] == "a"))
        return f"sm_{best['arch']} (SASS)"
    ptx = [a for a in archs if a.get("ptx") and a["cc"] <= cc and (a["suffix"] != "a" or a["cc"] == cc)]
    if ptx:
        best = max(ptx, key=lambda a: a["cc"])
        return f"compute_{best['arch']} (PTX, compiled by the driver at first use)"
    if any("cc" not in a for a in archs):
        return "unknown (architectures not resolved at build time)"
    return "none: this module holds no code for this GPU (rebuild with CUDAARCHS naming it)"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}" if v else "none"


def show_config(mode: str = "stdout") -> dict[str, Any] | None:
    """What this build of spillway holds and what it sees here.

    The version; the CUDA architectures compiled into ``spillway._core`` (recorded when it was
    built) and the nvcc that compiled them; the CUDA runtime it loaded and the driver's CUDA
    version; every GPU seen, with the code of this module it runs; whether the host fallback is
    in use (no usable GPU), and why.

    Parameters
    ----------
    mode : {"stdout", "dicts"}
        ``"stdout"`` prints the report and returns None (as ``numpy.show_config()`` does);
        ``"dicts"`` returns it as a dict instead.
    """
    if mode not in ("stdout", "dicts"):
        raise ValueError(f"show_config: mode must be 'stdout' or 'dicts', not {mode!r}")
    raw = _core._build_config()
    archs = _parse_archs(raw["cuda_architectures"])
    devices = [dict(d, compute_capability=tuple(d["compute_capability"]),
                    code=_code_for(tuple(d["compute_capability"]), archs)) for d in raw["devices"]]
    cfg = {
        "version": raw["version"],
        "distribution": "spillway-cu13",
        "module": _core.__file__,
        "cuda_architectures": [a["entry"] for a in archs],
        "cuda_toolkit_built_with": raw["cuda_toolkit_built_with"],
        "cuda_runtime": _cuda_version(raw["cuda_runtime"]),
        "cuda_driver": _cuda_version(raw["cuda_driver"]),
        "devices": devices,
        "host_fallback": not devices,
        "no_gpu_reason": raw["no_gpu_reason"],
    }
    if mode == "dicts":
        return cfg
    lines = [
        f"spillway {cfg['version']} ({cfg['distribution']})",
        f"  module:             {cfg['module']}",
        f"  CUDA architectures: {', '.join(cfg['cuda_architectures']) or 'unknown'}"
        f" (built with nvcc {cfg['cuda_toolkit_built_with'] or 'unknown'})",
        f"  CUDA runtime:       {cfg['cuda_runtime']}; driver: "
        + (f"supports CUDA {cfg['cuda_driver']}" if raw["cuda_driver"] else "none"),
    ]
    if devices:
        for d in devices:
            lines.append(f"  GPU {d['ordinal']}:              {d['name']}, compute capability "
                         f"{d['compute_capability'][0]}.{d['compute_capability'][1]}, "
                         f"{d['total_memory'] / 2**30:.1f} GiB; runs {d['code']}")
        lines.append("  host fallback:      no (the GPU paths run)")
    else:
        lines.append("  GPUs:               none")
        lines.append(f"  host fallback:      yes: {cfg['no_gpu_reason'] or 'no usable GPU'}")
    print("\n".join(lines))
    return None
