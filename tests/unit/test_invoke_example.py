"""The example client passes each row's business key as InferenceId, the key its label will carry."""

import importlib.util
import io
import json
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "invoke_endpoint.py"
spec = importlib.util.spec_from_file_location("invoke_endpoint", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def body(text):
    return StreamingBody(io.BytesIO(text.encode()), len(text))


def test_each_row_is_sent_with_its_id_as_inference_id(tmp_path, capsys):
    requests = tmp_path / "requests.csv"
    requests.write_text("age,order_id,color\n42,order-7,red\n17,order-8,\"blue, dark\"\n")
    runtime = boto3.client("sagemaker-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(runtime) as stub:
        for inference_id, payload, answer in (("order-7", "42,red", "0.91"), ("order-8", '17,"blue, dark"', "0.12")):
            stub.add_response("invoke_endpoint", {"Body": body(answer + "\n"), "ContentType": "text/csv"}, {
                "EndpointName": "ml-platform-dev-classifier", "ContentType": "text/csv", "Accept": "text/csv",
                "Body": payload, "InferenceId": inference_id})
        assert example.main(["ml-platform-dev-classifier", str(requests), "--id-column", "order_id"], runtime=runtime) == 0
        stub.assert_no_pending_responses()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [{"inferenceId": "order-7", "prediction": "0.91"}, {"inferenceId": "order-8", "prediction": "0.12"}]


def test_a_missing_id_column_or_a_too_long_id_is_refused(tmp_path):
    requests = tmp_path / "requests.csv"
    requests.write_text("age,order_id\n42," + "x" * 65 + "\n")
    with pytest.raises(SystemExit, match="has no column 'id'"):
        example.main(["e", str(requests), "--id-column", "id"], runtime=object())
    with pytest.raises(SystemExit, match="is not an InferenceId"):
        example.main(["e", str(requests), "--id-column", "order_id"], runtime=object())
