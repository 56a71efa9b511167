# Container images: build each image once through the Docker Engine API (Docker or Podman), lock
# their ids, bundle them for auditors. Runs depend on PLAN.out.image_record(image) (rules/runs.smk).
#
# Config: engine, engine_socket, images (build | locked), build_args, image_tag_prefix, images_lock.
rule container_image:
    input:
        lambda w: PLAN.container_inputs(w.image),
    output:
        record=PLAN.out.image_record("{image}"),
    log:
        PLAN.out.image_log("{image}"),  # the build's output
    params:
        engine=PLAN.config["engine"],
        socket=PLAN.engine_socket,
        build_args=PLAN.config.get("build_args") or {},
        tag_prefix=PLAN.config.get("image_tag_prefix", "localhost/mlrepro-"),
        mode=PLAN.config["images"],
        lock=PLAN.images_lock,
        repo=PLAN.repo,
        # an implementation folder's image: built from its own Dockerfile with the folder as context (none: ours)
        folder=lambda w: PLAN.image_folder(w.image),
        # the nodes' platform (systems.<name>.platform, e.g. linux/arm64 for GB200); "": the builder's
        platform=lambda w: PLAN.image_platform(w.image) or "",
        # The content of the build context, so that an edit rebuilds even where time stamps do not tell
        # (Snakemake skips an input that is only newer when its checksum is unchanged).
        context=lambda w: PLAN.rerun.build_context(w.image),
    script:
        "dispatch.py"


if PLAN.config["images"] != "locked":

    rule lock_images:
        input:
            [PLAN.out.image_record(image) for image in PLAN.images],
        output:
            PLAN.images_lock,
        log:
            PLAN.out.log("lock_images"),
        localrule: True
        script:
            "dispatch.py"


rule image_bundle:
    input:
        PLAN.images_lock,
    output:
        PLAN.out.image_bundle,
    params:
        engine=PLAN.config["engine"],
        socket=PLAN.engine_socket,
    log:
        PLAN.out.log("image_bundle"),
    script:
        "dispatch.py"


# Engine enroot: a registry image that a folder's run.sub is given (benchmarks.<bm>.image) imported once per system
# into a .sqsh on the shared file system, by a job on the cluster (mlrepro/containers/sqsh.py); it is CONT for every
# run of the system, whose job checks it against this record first.
rule sqsh_import:
    output:
        sqsh=f"{PLAN.out.root}/sqsh/{{system}}/{{sqsh}}",
        record=f"{PLAN.out.root}/sqsh/{{system}}/{{sqsh}}.json",
    params:
        job=lambda w: PLAN.sqsh_job(w.system, w.sqsh),
    wildcard_constraints:
        sqsh=PLAN.sqsh_names,
    resources:
        runtime=120,
    log:
        PLAN.out.log("sqsh_import_{system}_{sqsh}"),
    script:
        "dispatch.py"
