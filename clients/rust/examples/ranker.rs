//! Scores feed items with the example `ranker` model three ways: TF Serving Predict, KServe v2
//! inference, and KServe v2 with inputs and outputs in shared memory.
//!
//! ```sh
//! make serve   # in another terminal: serves examples/models on port 8500 (gRPC)
//! cargo run -p tensorport-client --example ranker [-- http://127.0.0.1:8500]
//! ```

use tensorport_client::{
    DataType, KserveClient, ShmInput, ShmOutput, ShmRegion, Tensor, TfServingClient,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8500".to_owned());
    let rows = 2;
    let features: Vec<f32> = (0..rows * 16).map(|i| i as f32 / 32.0).collect();
    let batch = Tensor::new([rows as i64, 16], &features)?;

    let mut tf = TfServingClient::connect(endpoint.clone()).await?;
    for (name, tensor) in tf.predict("ranker", None, &[("features", &batch)]).await? {
        println!("TF Serving Predict  {name}: {:?}", tensor.to_vec::<f32>()?);
    }

    let mut kserve = KserveClient::connect(endpoint).await?;
    for (name, tensor) in kserve
        .infer("ranker", None, &[("features", &batch)])
        .await?
    {
        println!("KServe infer        {name}: {:?}", tensor.to_vec::<f32>()?);
    }

    // Shared memory: this process creates and owns the region; the server maps it by name.
    let name = format!("ranker_example_{}", std::process::id());
    let mut region = ShmRegion::create(&name, 4096)?;
    let input_bytes = region.write(0, &features)?;
    let output_offset = 1024;
    kserve.register_region(&region).await?;
    let result = kserve
        .infer_in_region(
            "ranker",
            None,
            &mut region,
            &[ShmInput {
                name: "features",
                datatype: DataType::F32,
                shape: vec![rows as i64, 16],
                offset: 0,
                byte_size: input_bytes,
            }],
            &[ShmOutput {
                name: "score",
                offset: output_offset,
                byte_size: rows * 4,
            }],
        )
        .await;
    // Unregister whatever happened, then let `region` unlink the object when it drops.
    kserve.unregister_region(&name).await?;
    for output in result? {
        let scores: &[f32] = region.read(output_offset, rows)?;
        println!(
            "shared memory       {}: {scores:?} (read in place)",
            output.name
        );
    }
    Ok(())
}
