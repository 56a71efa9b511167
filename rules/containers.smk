# Container images: build each image once through the Docker Engine API (Docker or Podman), lock
# their ids, bundle them for auditors. Runs depend on {outdir}/containers/{image}.json (rules/runs.smk).
#
# Config: engine, engine_socket, images (build | locked), build_args, image_tag_prefix, images_lock.
from mlrepro.containers.context import context_digest, context_files, folder_files

CONTAINER_ENGINE = config.get("engine", "native")
CONTAINER_SOCKET = config.get("engine_socket") or None
IMAGES_MODE = config.get("images", "build")
# The lock sits with the outputs unless the config names one (e.g. a committed containers/images.lock.json).
IMAGES_LOCK = Path(config.get("images_lock") or OUT / "containers" / "images.lock.json")
CONTAINER_IMAGES = sorted({spec.image for spec in BENCHMARKS.values()})
# An implementation folder's image is built from its own Dockerfile with the folder as context;
# ours from containers/<image>/ with this repository as context.
IMAGE_FOLDERS = {b.image: b.implementation.folder for b in BENCHMARKS.values() if not b.mini}
REPO = Path(workflow.basedir)

# Builds talk to the local daemon/service, not to a cluster node.
localrules: container_image, lock_images, image_bundle


def container_inputs(wildcards):
    """Build mode: the files the image is built from (a changed Dockerfile or source rebuilds it).
    Locked mode: the lock file only (nothing is built)."""
    if IMAGES_MODE == "locked":
        return [IMAGES_LOCK]
    if folder := IMAGE_FOLDERS.get(wildcards.image):
        return [folder / p for p in folder_files(folder)]
    return [REPO / p for p in context_files(wildcards.image, REPO)]


def build_context_digest(image):
    if folder := IMAGE_FOLDERS.get(image):
        return context_digest(image, folder, folder_files(folder))
    return context_digest(image, REPO)


rule container_image:
    input:
        container_inputs,
    output:
        record=OUT / "containers" / "{image}.json",
    log:
        OUT / "containers" / "{image}.build.log",
    params:
        # In params, so that a changed build arg re-runs this rule (Snakemake's params trigger).
        build_args=config.get("build_args") or {},
        tag_prefix=config.get("image_tag_prefix", "localhost/mlrepro-"),
        mode=IMAGES_MODE,
        # The content of the build context, so that an edit rebuilds even where time stamps do not tell
        # (Snakemake skips an input that is only newer when its checksum is unchanged).
        context=lambda w: build_context_digest(w.image) if IMAGES_MODE != "locked" else "",
    run:
        from mlrepro.containers.jobs import image_record

        image_record(wildcards.image, Path(output.record), Path(log[0]), engine=CONTAINER_ENGINE,
                     socket=CONTAINER_SOCKET, mode=params.mode, build_args=dict(params.build_args),
                     tag_prefix=params.tag_prefix, lock_path=IMAGES_LOCK, root=REPO,
                     folder=IMAGE_FOLDERS.get(wildcards.image))


if IMAGES_MODE != "locked":

    rule lock_images:
        input:
            [OUT / "containers" / f"{image}.json" for image in CONTAINER_IMAGES],
        output:
            IMAGES_LOCK,
        run:
            from mlrepro.containers.jobs import lock

            lock([Path(p) for p in input], Path(output[0]))


rule image_bundle:
    input:
        IMAGES_LOCK,
    output:
        OUT / "images" / "bundle.json",
    run:
        from mlrepro.containers.jobs import make_bundle

        make_bundle(Path(input[0]), Path(output[0]).parent, engine=CONTAINER_ENGINE, socket=CONTAINER_SOCKET)
