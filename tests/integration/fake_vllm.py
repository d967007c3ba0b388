"""A `vllm` distribution made in a test: its package, its natives compiled from C, and the RECORD that lists them."""

from __future__ import annotations

from pathlib import Path

from pipeline.infra import procs

# a native that does not link: what an overlay on a wrong base is
UNLINKED = "extern int spark_nightly_gone(void);\nint PyInit_{name}(void) { return spark_nightly_gone(); }\n"


def vllm_distribution(site: Path, natives: dict[str, str], version: str, work: Path) -> Path:
    """The package folder of a `vllm` distribution in `site` with these native modules (module name -> C source,
    `{name}` standing for the module's name), compiled in `work`."""
    package = site / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    record = ["vllm/__init__.py,,"]
    for module, code in natives.items():
        source = work / f"{module}.c"
        source.write_text(code.replace("{name}", module))
        library = package / f"{module}.abi3.so"
        procs.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], work / "cc.log", timeout_s=60)
        record.append(f"vllm/{library.name},,")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "RECORD").write_text("\n".join([*record, f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]) + "\n")
    return package
