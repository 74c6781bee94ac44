"""The FastAPI yardstick of the http benchmark: what a Python user writes
instead of stubvisor. The same KServe v2 requests, answered in-process
with the numpy logic of testdata's add_sub, identity_fp32 and
identity_all (strings) models, by uvicorn with uvloop and httptools.

Run as: python3 fastapi_yardstick.py PORT WORKERS
"""

import json
import sys

import numpy as np
from fastapi import FastAPI, Request, Response

app = FastAPI()


def _outputs(model, outputs):
    return Response(
        json.dumps({"model_name": model, "model_version": "1", "outputs": outputs}),
        media_type="application/json",
    )


@app.post("/v2/models/add_sub/infer")
@app.post("/v2/models/add_sub_batched/infer")
@app.post("/v2/models/add_sub_many/infer")
@app.post("/v2/models/add_sub_cached/infer")
@app.post("/v2/models/add_sub_go/infer")
async def add_sub(request: Request):
    body = json.loads(await request.body())
    inputs = {t["name"]: np.array(t["data"], dtype=np.float32).reshape(t["shape"]) for t in body["inputs"]}
    in_0, in_1 = inputs["INPUT0"], inputs["INPUT1"]
    out_0 = (in_0 + in_1).astype(np.float32)
    out_1 = (in_0 - in_1).astype(np.float32)
    return _outputs("add_sub", [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": list(out_0.shape), "data": out_0.ravel().tolist()},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": list(out_1.shape), "data": out_1.ravel().tolist()},
    ])


@app.post("/v2/models/identity_all/infer")
async def identity_all(request: Request):
    body = json.loads(await request.body())
    outputs = []
    for t in body["inputs"]:
        if t["datatype"] == "BYTES":
            array = np.array([s.encode() for s in t["data"]], dtype=np.object_).reshape(t["shape"])
            data = [b.decode() for b in array.ravel()]
        else:
            array = np.array(t["data"]).reshape(t["shape"])
            data = array.ravel().tolist()
        outputs.append({"name": "OUTPUT_" + t["name"][len("INPUT_"):], "datatype": t["datatype"],
                        "shape": list(array.shape), "data": data})
    return _outputs("identity_all", outputs)


@app.post("/v2/models/identity_fp32/infer")
async def identity_fp32(request: Request):
    """Binary tensor data extension: a JSON header, then the raw tensor."""
    body = await request.body()
    size = int(request.headers.get("inference-header-content-length", len(body)))
    header = json.loads(body[:size])
    t = header["inputs"][0]
    array = np.frombuffer(body, dtype=np.float32, offset=size).reshape(t["shape"])
    out = array.tobytes()
    out_header = json.dumps({"model_name": "identity_fp32", "model_version": "1", "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": list(array.shape),
         "parameters": {"binary_data_size": len(out)}}]}).encode()
    return Response(out_header + out, media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(out_header))})


@app.get("/v2/health/ready")
async def ready():
    return Response()


if __name__ == "__main__":
    import uvicorn

    sys.path.insert(0, __import__("os").path.dirname(__file__))
    uvicorn.run("fastapi_yardstick:app", host="127.0.0.1", port=int(sys.argv[1]), workers=int(sys.argv[2]),
                loop="uvloop", http="httptools", log_level="warning", access_log=False)
