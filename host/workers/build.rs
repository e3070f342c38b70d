//! Generates the gRPC code of the coordinator–worker contract
//! (`proto/coordhost/worker/v1/worker.proto`, issue 14) with protox, a
//! protobuf compiler written in Rust, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/coordhost/worker/v1/worker.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["../../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;
    Ok(())
}
